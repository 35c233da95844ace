// The public Engine: opens a model (engine/loaded_model, shared with ServingEngine) with a KV cache of one
// context, and runs one sequence at a time through a Session (many requests at once: ServingEngine).
#include "ferry/engine.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "core/env.h"
#include "engine/draft_proposer.h"
#include "engine/loaded_model.h"
#include "engine/ngram_proposer.h"
#include "engine/oracle_proposer.h"
#include "engine/session.h"
#include "engine/spec_verify.h"
#include "kv/block_pool.h"
#include "sampling/sampler.h"

namespace ferry {

struct Engine::Impl {
  std::unique_ptr<LoadedModel> m;
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<Session> session;
  bool device_sampling = false;  // EngineOptions::device_sampling where the backend can: draw on the backend
  // EngineOptions::pipelined_decode, with device sampling: generate() launches step t + 1 on the token step t draws
  // on the device before the host has read it (Session::launch_decode), so the host's work between steps (reading
  // the token back, detokenizing, the next launch) overlaps the GPU's (docs/perf-log.md "## 2026-11-30: pipelined
  // generation and TP=2 at 1.49x").
  bool pipelined = false;
  // EngineOptions::spec: the proposer of the one sequence (and the draft model it runs), null when off.
  std::unique_ptr<DraftModel> draft;
  std::unique_ptr<Proposer> proposer;
  int spec_k = 0;
  std::unique_ptr<Proposer> oracle;  // replay_proposals (benchmarks): used instead of `proposer` while set
  int oracle_k = 0;
};

Engine::Engine(const EngineOptions& o) : impl_(std::make_unique<Impl>()) {
  // One sequence: a cache of one context, steps of at most one context.
  impl_->m = load_model(o, [&](const ModelConfig&, int32_t context) {
    return KvSizing{.kv_tokens = context, .max_step_tokens = std::min(o.max_step_tokens, context)};
  });
  LoadedModel& m = *impl_->m;
  impl_->pool = std::make_unique<BlockPool>(m.model->kv_shape().n_blocks);
  impl_->session = std::make_unique<Session>(*m.model, *impl_->pool, m.context);
  impl_->device_sampling = o.device_sampling && m.model->supports_device_sampling();
  impl_->pipelined = impl_->device_sampling && o.pipelined_decode;
  if (impl_->pipelined) m.model->set_token_feedback(true);
  impl_->spec_k = o.spec.k;
  switch (o.spec.mode) {
    case SpecMode::Off: break;
    case SpecMode::Ngram: impl_->proposer = std::make_unique<NgramProposer>(); break;
    case SpecMode::Draft:
      impl_->draft = load_draft_model(o, m, m.context);
      impl_->proposer = std::make_unique<DraftProposer>(*impl_->draft);
      break;
  }
  if (impl_->proposer) FERRY_CHECK(o.spec.k >= 1 && o.spec.k <= kMaxSpecTokens, "speculation: k must be in 1..{}, got {}",
                                   kMaxSpecTokens, o.spec.k);
}

Engine::~Engine() = default;

const ModelInfo& Engine::info() const { return impl_->m->info; }

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->m->tokenize(text, add_special, parse_special);
}

std::string Engine::detokenize(std::span<const int32_t> tokens) const { return impl_->m->tokenizer->decode(tokens); }

bool Engine::has_chat_template() const { return impl_->m->chat_template != nullptr; }

std::string Engine::apply_chat_template(const std::vector<ChatTurn>& turns, bool add_generation_prompt) const {
  return impl_->m->apply_chat_template(turns, add_generation_prompt);
}

GenerateResult Engine::generate(std::span<const int32_t> prompt, const SamplingParams& params, int max_tokens,
                                const TokenCallback& on_token, bool stop_at_eog) {
  using Clock = std::chrono::steady_clock;
  Impl& m = *impl_;
  LlamaModel& model = *m.m->model;
  const Tokenizer& tokenizer = *m.m->tokenizer;
  FERRY_CHECK(max_tokens >= 0, "max tokens {} must not be negative", max_tokens);
  FERRY_CHECK(!prompt.empty(), "empty prompt: nothing to generate from");
  FERRY_CHECK(int64_t(prompt.size()) <= m.session->max_context(),
              "prompt of {} tokens is longer than the context of {} tokens", prompt.size(), m.session->max_context());
  Sampler sampler(params, model.config().vocab_size);  // validates params; the host path's sampler
  // Draw on the device where the backend can (only the id crosses to the host); penalties need the host. A verify
  // step then draws every row there too (Session::verify_sampled), the draws the plain decode makes.
  const bool on_device = m.device_sampling && !params.penalties_active();
  Proposer* const proposer = m.oracle ? m.oracle.get() : m.proposer.get();
  const int spec_k = m.oracle ? m.oracle_k : m.spec_k;
  const auto drawn = [](int32_t tok) {
    FERRY_CHECK(tok >= 0, "sampler: every logit is NaN or -inf, nothing to sample");
    return tok;
  };
  int32_t next = -1;  // on_device: the token drawn with the last step
  IncrementalDetokenizer detok(tokenizer);
  GenerateResult r;
  r.n_prompt = int(prompt.size());

  const auto t0 = Clock::now();
  const int32_t before = m.session->n_tokens();
  std::span<const float> logits;
  if (on_device) {
    next = m.session->set_history_sampled(prompt, params);
  } else {
    logits = m.session->set_history(prompt);
  }
  r.n_prompt_computed = int(prompt.size()) - std::min<int32_t>(before, int32_t(prompt.size()) - 1);
  const auto t1 = Clock::now();
  r.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();

  // Generated token i: false where generation stops at it (end of generation, or the callback says so).
  const auto emit = [&](int32_t tok) {
    if (stop_at_eog && tokenizer.is_eog(tok)) {
      r.finish = FinishReason::Stop;
      return false;
    }
    r.tokens.push_back(tok);
    const std::string piece = detok.push(tok);
    r.text += piece;
    if (on_token && !on_token(piece, tok)) {
      r.finish = FinishReason::Stop;
      return false;
    }
    return true;
  };
  // Whether the step on token i runs, i.e. token i + 1 is wanted. The last token is not run: nothing would sample
  // from its logits. The next generate() call computes it as part of its prompt (set_history keeps the common
  // prefix).
  const auto runs_step = [&](int i) { return i + 1 < max_tokens && m.session->n_tokens() < m.session->max_context(); };

  if (proposer) {
    // Each step runs the last token and up to k proposals (engine/spec_verify.h) and keeps the proposals the
    // sampler draws itself at their positions; the rows after the first mismatch are truncated away.
    SpecLength length(spec_k);
    std::vector<int32_t> proposals, run_tokens, emitted, history, ids;
    std::vector<float> rows;  // (proposals + 1, vocab_size) logits of the verify step (host sampling)
    const size_t V = size_t(model.config().vocab_size);
    int32_t tok = max_tokens <= 0 ? -1 : on_device ? drawn(next) : sampler.sample(logits, m.session->history());
    for (int produced = 0; max_tokens > 0;) {
      if (!emit(tok)) break;
      ++produced;
      if (!runs_step(produced - 1)) break;
      // Proposals that fit the context and max_tokens (the step emits accepted + 1 tokens).
      const int32_t n0 = m.session->n_tokens();
      const int32_t cap = std::min({length.next(), max_tokens - produced - 1, m.session->max_context() - n0 - 1});
      history.assign(m.session->history().begin(), m.session->history().end());
      history.push_back(tok);
      proposer->propose(history, std::max(cap, 0), proposals);
      run_tokens.assign(1, tok);
      run_tokens.insert(run_tokens.end(), proposals.begin(), proposals.end());
      if (on_device) {
        m.session->verify_sampled(run_tokens, params, ids);
      } else {
        m.session->verify(run_tokens, rows);
      }
      ++r.target_steps;
      history.insert(history.end(), proposals.begin(), proposals.end());
      const int32_t accepted = verify_point_proposals(proposals, [&](size_t i) {
        if (on_device) return drawn(ids[i]);
        return sampler.sample(std::span<const float>(rows).subspan(i * V, V),
                              std::span<const int32_t>(history).first(size_t(n0) + 1 + i));
      }, emitted);
      m.session->truncate(n0 + 1 + accepted);  // the rejected proposals' K/V is dropped
      r.spec_proposed += int64_t(proposals.size());
      r.spec_accepted += accepted;
      length.update(int32_t(proposals.size()), accepted);
      bool go_on = true;
      for (int32_t i = 0; i < accepted && go_on; ++i) {
        go_on = emit(emitted[size_t(i)]);
        ++produced;
      }
      if (!go_on) break;
      tok = emitted.back();
    }
  } else if (on_device && m.pipelined) {
    // Step i + 1 is launched on step i's draw before the host reads that draw: the same steps as the loop below
    // (runs_step of the same history), and a stop drops the step launched on the stopping token.
    int32_t tok = drawn(next);  // token i
    bool in_flight = runs_step(0);
    try {
      if (in_flight) m.session->launch_decode(tok, params);
      r.target_steps += in_flight ? 1 : 0;
      for (int i = 0; i < max_tokens && emit(tok) && in_flight; ++i) {
        const bool launch = runs_step(i + 1);
        r.target_steps += launch ? 1 : 0;
        if (launch) m.session->launch_decode(Session::kDrawnByPrevious, params);
        tok = drawn(m.session->collect_decode());
        in_flight = launch;
      }
      m.session->drop_decode();
    } catch (...) {
      try {
        m.session->drop_decode();
      } catch (...) {  // the step's own error is the one to report
      }
      throw;
    }
  } else {
    for (int i = 0; i < max_tokens; ++i) {
      const int32_t tok = on_device ? drawn(next) : sampler.sample(logits, m.session->history());
      if (!emit(tok) || !runs_step(i)) break;
      ++r.target_steps;
      const int32_t one[1] = {tok};
      if (on_device) {
        next = m.session->append_sampled(one, params);
      } else {
        logits = m.session->append(one);
      }
    }
  }
  const std::string rest = detok.flush();
  if (!rest.empty()) {
    r.text += rest;
    if (on_token) on_token(rest, -1);
  }
  r.gen_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return r;
}

std::vector<float> Engine::score(std::span<const int32_t> tokens) {
  impl_->session->reset();
  std::vector<float> logits;
  impl_->session->append_all_logits(tokens, logits);
  return logits;
}

void Engine::reset() { impl_->session->reset(); }

void Engine::replay_proposals(std::vector<int32_t> recorded, int k) {
  if (recorded.empty()) {
    impl_->oracle.reset();
    return;
  }
  FERRY_CHECK(k >= 1 && k <= kMaxSpecTokens, "speculation: k must be in 1..{}, got {}", kMaxSpecTokens, k);
  impl_->oracle = std::make_unique<OracleProposer>(std::move(recorded));
  impl_->oracle_k = k;
}

}  // namespace ferry
