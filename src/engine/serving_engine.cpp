// ServingEngine: the public API (submit, stats, shutdown) and the engine loop thread. Each step is
// schedule (engine/scheduler) -> run (engine/model_runner) -> postprocess (engine/postprocess), with KV
// blocks and the prefix cache in engine/block_manager.
#include "ferry/serving.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/check.h"
#include "core/env.h"
#include "core/thread_pool.h"
#include "engine/block_manager.h"
#include "engine/draft_proposer.h"
#include "engine/loaded_model.h"
#include "engine/model_runner.h"
#include "engine/ngram_proposer.h"
#include "engine/postprocess.h"
#include "engine/request_queue.h"
#include "engine/scheduler.h"
#include "engine/spec_step.h"
#include "engine/step_profile.h"
#include "grammar/grammar_cache.h"
#include "engine/output_format_grammar.h"

namespace ferry {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int32_t kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 1024;
constexpr int32_t kMaxLogprobs = 20;

// KV capacity in tokens when ServingOptions.kv_tokens is 0: CPU: max_running sequences of full context, within
// 50% of RAM; CUDA: 90% of the memory free once the weights are loaded. Never less than one context.
// Example: SmolLM2-135M (30 layers, 3 KV heads x 64) takes 46 KiB per token; 64 x 4096 tokens = 11.3 GiB, so
// on a 24 GiB machine the cap of 12 GiB (~266k tokens) leaves the full 262k.
int64_t automatic_kv_tokens(const EngineOptions& eo, const ServingOptions& so, const ModelConfig& c,
                            int32_t context) {
  const double per_token = double(kv_bytes_per_token(c));
  double budget_tokens = 0;
  if (eo.device == "cpu") {
    budget_tokens = 0.5 * host_memory_bytes() / per_token;
  } else {
    budget_tokens = 0.9 * device_free_bytes(eo) / per_token;
  }
  const double want = std::min(double(so.max_running) * double(context), budget_tokens);
  return std::max<int64_t>(context, int64_t(want));
}

// Threads (the loop thread included) that sample a step's rows: on the CPU backend 1 (serial), since its
// compute threads already use every core and sampling sits between their steps anyway; on an accelerator
// the host cores are idle while the step runs, and 55 rows x 128k-vocab sampling (~50-90 us each) was 5 ms
// of a 21 ms decode step on the H200's host: min(8, hardware threads / 2) leaves half the cores to the HTTP
// threads.
int postprocess_threads(const EngineOptions& eo, const ServingOptions& so) {
  if (so.postprocess_threads > 0) return so.postprocess_threads;
  if (eo.device == "cpu") return 1;
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  return std::clamp(hw / 2, 1, 8);
}

void validate_options(const ServingOptions& s) {
  FERRY_CHECK(s.max_running >= 1 && s.max_running <= 4096, "serving: max_running must be in 1..4096, got {}",
              s.max_running);
  FERRY_CHECK(s.max_step_tokens >= s.max_running && s.max_step_tokens <= 65536,
              "serving: max_step_tokens must be in max_running ({})..65536, got {}", s.max_running, s.max_step_tokens);
  FERRY_CHECK(s.postprocess_threads >= 0 && s.postprocess_threads <= 256,
              "serving: postprocess_threads must be in 0..256, got {}", s.postprocess_threads);
  FERRY_CHECK(s.max_waiting >= 0 && s.max_waiting <= (1 << 20), "serving: max_waiting must be in 0..{}, got {}",
              1 << 20, s.max_waiting);
  FERRY_CHECK(s.kv_tokens >= 0, "serving: kv_tokens must be >= 0 (0: automatic), got {}", s.kv_tokens);
}

}  // namespace

struct ServingEngine::Impl {
  ServingOptions options;
  std::unique_ptr<LoadedModel> m;
  std::unique_ptr<DraftModel> draft;  // speculation with a draft model: before `live` (its sequences' draft KV)
  std::unique_ptr<BlockManager> blocks;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<ModelRunner> runner;
  std::shared_ptr<RequestQueue> queue = std::make_shared<RequestQueue>();
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> live;  // loop thread only
  std::atomic<uint64_t> next_id{1};
  mutable std::mutex stats_mu;
  ServingStats stats;  // guarded by stats_mu (running/waiting filled by stats())
  std::unique_ptr<ThreadPool> postprocess_pool;  // samples a step's rows in parallel; null: serially
  std::vector<SampleRow> rows;                    // loop thread only: the current step's rows to sample
  bool device_sampling = false;                   // rows without logprobs/penalties are drawn on the device
  bool async_scheduling = false;                  // device_sampling and ServingOptions::async_scheduling
  // Speculative decoding: the requests' default (EngineOptions::spec).
  SpecOptions spec_default;
  std::vector<int32_t> verify_history;  // loop thread only: a verify chunk's tokens + proposals
  // A launched step not yet postprocessed. With asynchronous scheduling one stays in flight between loop
  // iterations: step k+1 is scheduled and launched before step k is postprocessed (see step()).
  struct LaunchedStep {
    StepPlan plan;
    std::vector<RowSampling> rows;        // (sampling chunks) how each row samples (device sampling only)
    std::vector<int32_t> placeholder_at;  // (sampling chunks) index of the row's placeholder in seq->tokens, -1: none
    std::vector<uint32_t> epoch;          // (chunks) the sequence's epoch at launch
    bool must_finish = false;             // postprocess before the next launch (host rows, or not asynchronous)
    Clock::time_point scheduled;          // when its schedule() began
    double schedule_s = 0, launch_s = 0;
  };
  std::deque<LaunchedStep> launched;  // loop thread only; oldest first
  // Finished sequences that a launched step still names (Sequence::steps_in_flight > 0): kept until it is postprocessed.
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> retired;
  Clock::time_point last_completion{};
  StepProfile profile;  // loop thread only; printed at the end with FERRY_LOG=debug
  bool debug = false;
  std::mutex join_mu;
  std::thread loop;
  // Structured output: compiled formats by text, over the model's vocabulary (made on first use; thread-safe).
  std::once_flag grammars_once;
  std::unique_ptr<grammar::GrammarCache> grammars;
  grammar::GrammarCache& grammar_cache();

  void run_loop();
  // One iteration: schedule, launch, then postprocess every launched step but (asynchronous scheduling) the newest.
  void step();
  void launch(StepPlan&& plan, Clock::time_point scheduled);
  void complete_oldest();  // waits for the oldest launched step and postprocesses it
  // Structured output: seqs' grammar masks (Sequence::grammar_mask), on the sample threads.
  void compute_masks(std::span<Sequence* const> seqs);
  // The newest launched step's draw, when its masked rows wait for their masks (ModelRunner::seal).
  void seal_newest();
  // Speculation: the postprocess of a verify chunk (sampling chunk i of the step): the target's draws decide the
  // kept proposals (spec_verify.h), the rest of the K/V is dropped, the kept tokens and the next are emitted.
  void postprocess_verify(const ScheduledChunk& c, size_t i, int64_t& new_tokens);
  // Whether the token a row of seq draws now ends its request whatever it is (max_tokens or the context): no
  // later step needs it, so it gets no placeholder.
  bool last_token(const Sequence& seq) const;
  // Ends a sequence: out of the scheduler, blocks back, final update, counters.
  void finish(Sequence* seq, FinishReason reason, std::string_view text, std::vector<GeneratedToken>&& tokens,
              std::string error = {});
  void drop(Sequence* seq);  // out of `live` (into `retired` while a launched step names it)
  void fail_all(const std::string& error);
  void publish_stats(double step_seconds, int64_t new_tokens);
  void check_invariants() const;
};

grammar::GrammarCache& ServingEngine::Impl::grammar_cache() {
  std::call_once(grammars_once, [&] {
    // (vocab_size) token bytes: control tokens and the padding rows past the tokenizer's vocabulary are empty
    // (never allowed); end-of-generation tokens are the stop tokens, allowed when the format is complete.
    const Tokenizer& tok = *m->tokenizer;
    const int32_t vocab = m->model->config().vocab_size;
    std::vector<std::string> bytes(static_cast<size_t>(vocab));
    std::vector<int32_t> stops;
    for (int32_t id = 0; id < std::min(vocab, tok.vocab_size()); ++id) {
      if (tok.is_eog(id)) stops.push_back(id);
      else if (!tok.is_control(id)) bytes[size_t(id)] = tok.token_to_piece(id);
    }
    grammars = std::make_unique<grammar::GrammarCache>(
        std::make_shared<const grammar::TokenVocab>(std::move(bytes), std::move(stops)), 64);
  });
  return *grammars;
}

void ServingEngine::Impl::check_invariants() const {
  const BlockPool& pool = blocks->pool();
  pool.check_invariants();
  std::vector<int32_t> held(size_t(pool.n_blocks()), 0);  // (n_blocks) references the live sequences hold
  for (const Sequence* seq : scheduler->running()) {
    FERRY_CHECK(seq->state == SequenceState::Running, "serving invariant: sequence {} is running in state {}",
                seq->id, int(seq->state));
    FERRY_CHECK(seq->n_inflight >= 0 && seq->n_inflight <= seq->table.n_tokens && seq->n_placeholders >= 0 &&
                    seq->n_placeholders <= seq->steps_in_flight,
                "serving invariant: sequence {} has {} of {} tokens in flight, {} placeholders, {} launched steps",
                seq->id, seq->n_inflight, seq->table.n_tokens, seq->n_placeholders, seq->steps_in_flight);
    FERRY_CHECK(seq->table.capacity(blocks->block_size()) >= int32_t(seq->tokens.size()) - 1 &&
                    seq->table.n_tokens <= int32_t(seq->tokens.size()),
                "serving invariant: sequence {} has {} blocks for {} tokens ({} computed)", seq->id,
                seq->table.blocks.size(), seq->tokens.size(), seq->table.n_tokens);
    for (const int32_t b : seq->table.blocks)
      if (b >= 0) ++held[size_t(b)];  // -1: given back behind the sliding window
  }
  for (const Sequence* seq : scheduler->waiting())
    FERRY_CHECK(seq->table.blocks.empty() && seq->table.n_tokens == 0 && seq->n_inflight == 0 &&
                    seq->state == SequenceState::Waiting,
                "serving invariant: waiting sequence {} holds {} blocks", seq->id, seq->table.blocks.size());
  for (int32_t b = 0; b < pool.n_blocks(); ++b)
    FERRY_CHECK(pool.ref_count(b) == held[size_t(b)],
                "serving invariant: block {} has ref count {} but {} references are held (leak or double use)", b,
                pool.ref_count(b), held[size_t(b)]);
  FERRY_CHECK(int32_t(scheduler->running().size()) <= options.max_running, "serving invariant: {} running > {}",
              scheduler->running().size(), options.max_running);
}

void ServingEngine::Impl::finish(Sequence* seq, FinishReason reason, std::string_view text,
                                 std::vector<GeneratedToken>&& tokens, std::string error) {
  if (seq->state != SequenceState::Finished) scheduler->remove(seq);
  {  // the counters first: a caller that sees the final update sees them too
    std::lock_guard lock(stats_mu);
    switch (reason) {
      case FinishReason::Stop:
      case FinishReason::Length: ++stats.requests_finished; break;
      case FinishReason::Cancelled: ++stats.requests_cancelled; break;
      case FinishReason::Error: ++stats.requests_failed; break;
    }
    stats.running = int32_t(scheduler->running().size());
    stats.kv_blocks_used = blocks->pool().n_used();
  }
  seq->channel->finish(text, std::move(tokens), seq->usage, reason, std::move(error));
  drop(seq);
}

void ServingEngine::Impl::drop(Sequence* seq) {
  const auto it = live.find(seq->id);
  if (it == live.end()) return;
  if (seq->steps_in_flight > 0) retired.emplace(seq->id, std::move(it->second));
  live.erase(it);
}

bool ServingEngine::Impl::last_token(const Sequence& seq) const {
  const int32_t completion_after = seq.usage.completion_tokens + seq.n_placeholders + 1;
  return completion_after >= seq.request.max_tokens || int32_t(seq.tokens.size()) + 1 > m->context;
}

void ServingEngine::Impl::fail_all(const std::string& error) {
  std::vector<Sequence*> all;
  for (auto& [id, seq] : live) all.push_back(seq.get());
  for (Sequence* seq : all) {
    try {
      finish(seq, FinishReason::Error, {}, {}, error);
    } catch (const std::exception&) {  // the scheduler's bookkeeping is broken: still answer the caller
      seq->channel->finish({}, {}, seq->usage, FinishReason::Error, error);
      drop(seq);
    }
  }
}

void ServingEngine::Impl::publish_stats(double step_seconds, int64_t new_tokens) {
  std::lock_guard lock(stats_mu);
  stats.running = int32_t(scheduler->running().size());
  stats.kv_blocks_used = blocks->pool().n_used();
  stats.preemptions = scheduler->preemptions();
  stats.generated_tokens += new_tokens;
  stats.logits_host_bytes = m->model->logits_traffic().host_bytes;
  stats.device_sampled_tokens = m->model->logits_traffic().device_rows;
  stats.graph_replays = m->model->graph_stats().replays;
  if (step_seconds > 0) {
    ++stats.steps;
    stats.busy_seconds += step_seconds;
  }
}

void ServingEngine::Impl::step() {
  const auto t0 = Clock::now();
  for (Sequence* seq : scheduler->running()) propose_draft(*seq, m->context);
  StepPlan plan = scheduler->schedule();
  for (Sequence* seq : plan.admitted) {
    if (seq->admitted_once) continue;
    seq->admitted_once = true;
    seq->usage.prompt_tokens = seq->n_prompt;
    seq->usage.cached_prompt_tokens = seq->n_computed();
    seq->sampler.emplace(seq->request.sampling, m->model->config().vocab_size);
    seq->text.emplace(*m->tokenizer, seq->request.stop);
    std::lock_guard lock(stats_mu);
    stats.prompt_tokens += seq->n_prompt;
    stats.prompt_tokens_cached += seq->n_computed();
  }
  if (plan.empty()) {
    // Every running sequence waits for a token of the launched step (its last one): postprocess that step.
    if (!launched.empty()) {
      complete_oldest();
    } else if (scheduler->running().empty() && !scheduler->waiting().empty()) {
      // Nothing runs and nothing can be admitted: the front request needs more blocks than the whole cache
      // (cannot happen when the cache holds one context, which the constructor ensures; never hang regardless).
      finish(scheduler->waiting().front(), FinishReason::Error, {}, {}, "serving: the request does not fit the KV cache");
    }
  } else {
    launch(std::move(plan), t0);
    // Asynchronous scheduling: the step just launched runs while the previous one is postprocessed and the next
    // one scheduled. Otherwise (or when its rows need the host's logits) it is postprocessed now. Its masked rows'
    // draw waits until the step before has been postprocessed (their masks need its tokens).
    while (launched.size() > 1) complete_oldest();
    seal_newest();
    if (!launched.empty() && launched.back().must_finish) complete_oldest();
  }
  if (options.check_invariants) check_invariants();
}

void ServingEngine::Impl::postprocess_verify(const ScheduledChunk& c, size_t i, int64_t& new_tokens) {
  Sequence* seq = c.seq;
  std::vector<int32_t> emitted;
  int32_t accepted = 0;
  try {
    accepted = verify_chunk(c, i, *runner, *blocks, verify_history, emitted);
  } catch (const std::exception& e) {
    finish(seq, FinishReason::Error, {}, {}, fmt::format("sampling failed: {}", e.what()));
    return;
  }
  {
    std::lock_guard lock(stats_mu);
    stats.spec_proposed += c.n_draft;
    stats.spec_accepted += accepted;
    ++stats.spec_steps;
  }
  for (const int32_t tok : emitted) {
    SampleRow r;
    r.seq = seq;
    r.token = tok;
    try {
      TokenOutcome out = finish_token(r, *m->tokenizer, m->context);
      ++new_tokens;
      if (out.finished) {
        finish(seq, out.reason, out.text, std::move(out.tokens));
        return;
      }
    } catch (const std::exception& e) {
      finish(seq, FinishReason::Error, {}, {}, fmt::format("sampling failed: {}", e.what()));
      return;
    }
  }
  blocks->commit(*seq);  // the kept tokens are in seq->tokens now
}

void ServingEngine::Impl::launch(StepPlan&& plan, Clock::time_point scheduled) {
  LaunchedStep s;
  s.scheduled = scheduled;
  const auto t1 = Clock::now();
  s.schedule_s = std::chrono::duration<double>(t1 - scheduled).count();
  // A verify step is postprocessed before the next launch (its rows' tokens decide the next step's).
  s.must_finish = !async_scheduling || std::any_of(plan.chunks.begin(), plan.chunks.end(),
                                                   [](const ScheduledChunk& c) { return c.n_draft > 0; });
  if (device_sampling) {
    // A row goes to the device sampler unless its request needs the logits on the host (logprobs) or
    // options the kernel does not do (penalties). Position: the history length, as the host sampler uses.
    for (const ScheduledChunk& c : plan.chunks) {
      if (!c.sample) continue;
      const GenerationRequest& req = c.seq->request;
      RowSampling& r = s.rows.emplace_back();
      // Speculating sequences too: their verify steps need every row's logits, and their next proposals the
      // token of this step (so their steps finish before the next launch, without placeholders).
      // Structured output draws on the device too, with the matcher's mask (seal_newest).
      const bool host = req.logprobs >= 0 || req.sampling.penalties_active() || c.seq->reasoning_gate != nullptr ||
                        !req.logit_bias.empty() || c.seq->proposer != nullptr;
      r.mode = host ? RowMode::Host : RowMode::Device;
      r.masked = !host && c.seq->matcher != nullptr;
      r.params = req.sampling;
      r.position = uint64_t(c.seq->tokens.size());
      s.must_finish = s.must_finish || host;
    }
  }
  try {
    if (device_sampling) {
      runner->launch_sampled(plan, s.rows);
    } else {
      runner->run(plan);  // synchronous: the logits are on the host when it returns
    }
  } catch (const std::exception& e) {
    const std::string error = fmt::format("engine step failed: {}", e.what());
    for (const ScheduledChunk& c : plan.chunks)
      if (c.seq->state != SequenceState::Finished) finish(c.seq, FinishReason::Error, {}, {}, error);
    publish_stats(std::chrono::duration<double>(Clock::now() - scheduled).count(), 0);
    return;
  }
  // The chunks' K/V are being written: the sequences advance now. A row drawn on the device leaves a placeholder
  // for its token, so the next step can compute it before it is known here (not when nothing will follow it).
  size_t row = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence* seq = c.seq;
    s.epoch.push_back(seq->epoch);
    seq->table.n_tokens += c.n_tokens;
    seq->n_inflight += c.n_tokens;
    ++seq->steps_in_flight;
    if (!c.sample) continue;
    const size_t i = row++;
    int32_t at = -1;
    if (async_scheduling && !s.must_finish && s.rows[i].mode == RowMode::Device && !last_token(*seq)) {
      at = int32_t(seq->tokens.size());
      seq->tokens.push_back(-int32_t(i) - 1);  // Backend::resolve_placeholders: row i of this step
      ++seq->n_placeholders;
    }
    s.placeholder_at.push_back(at);
  }
  // Structured output drawn on the host: the rows' masks are computed now, on the sample threads, while the device
  // runs the step (the matcher's state is final: a Host row is postprocessed before the next launch).
  std::vector<Sequence*> constrained;
  for (size_t j = 0, i = 0; j < plan.chunks.size(); ++j) {
    const ScheduledChunk& c = plan.chunks[j];
    if (!c.sample) continue;
    const bool on_device = device_sampling && s.rows[i++].mode == RowMode::Device;
    if (!on_device && c.seq->matcher && !c.seq->matcher->is_terminated()) constrained.push_back(c.seq);
  }
  compute_masks(constrained);
  s.launch_s = std::chrono::duration<double>(Clock::now() - t1).count();
  s.plan = std::move(plan);
  if (!launched.empty()) {  // the previous step is still in flight: this one overlaps its postprocessing
    std::lock_guard lock(stats_mu);
    ++stats.overlapped_steps;
  }
  launched.push_back(std::move(s));
}

void ServingEngine::Impl::compute_masks(std::span<Sequence* const> seqs) {
  if (seqs.empty()) return;
  const size_t vocab = size_t(m->model->config().vocab_size);
  auto one = [&](int64_t i) {
    try {
      compute_grammar_mask(*seqs[size_t(i)], vocab);
    } catch (const std::exception&) {
      seqs[size_t(i)]->grammar_mask_ready = false;  // the host sampler computes it again and reports the error
    }
  };
  if (postprocess_pool && postprocess_pool->size() > 1 && seqs.size() > 1) {
    postprocess_pool->run_chunks(int64_t(seqs.size()), one);
  } else {
    for (size_t i = 0; i < seqs.size(); ++i) one(int64_t(i));
  }
}

void ServingEngine::Impl::seal_newest() {
  if (launched.empty() || !runner->newest_unsealed()) return;
  const LaunchedStep& s = launched.back();
  // The masked rows' matchers have taken every token drawn so far (the step before was postprocessed), so their
  // masks are final; the device is running this step's forward meanwhile.
  std::vector<Sequence*> seqs;
  std::vector<size_t> at;  // (seqs) their sampling rows
  size_t i = 0;
  for (size_t j = 0; j < s.plan.chunks.size(); ++j) {
    const ScheduledChunk& c = s.plan.chunks[j];
    if (!c.sample) continue;
    const size_t row = i++;
    if (!s.rows[row].masked || c.seq->state == SequenceState::Finished || c.seq->epoch != s.epoch[j]) continue;
    seqs.push_back(c.seq);
    at.push_back(row);
  }
  compute_masks(seqs);
  std::vector<std::span<const uint64_t>> masks(i);
  const size_t words = (size_t(m->model->config().vocab_size) + 63) / 64;
  for (size_t k = 0; k < seqs.size(); ++k) {
    Sequence& seq = *seqs[k];
    // A mask that failed: no token allowed, so the draw finds nothing and the row's request fails (never unmasked).
    if (!seq.grammar_mask_ready) seq.grammar_mask.assign(words, 0);
    seq.grammar_mask_ready = false;  // this draw uses it
    masks[at[k]] = seq.grammar_mask;
  }
  runner->seal(masks);  // rows of finished sequences: no mask (their draw is wasted anyway)
}

void ServingEngine::Impl::complete_oldest() {
  LaunchedStep s = std::move(launched.front());
  launched.pop_front();
  const auto t2 = Clock::now();
  std::string error;
  if (device_sampling) {
    try {
      runner->collect();
    } catch (const std::exception& e) {
      error = fmt::format("engine step failed: {}", e.what());
    }
  }
  const auto t3 = Clock::now();
  // The step's K/V are complete (into the prefix cache), unless the sequence was preempted since (a new table) or
  // has ended. (The step still holds its sequences until the end of this function: one that finishes below stays
  // alive in `retired` until then.)
  for (size_t j = 0; j < s.plan.chunks.size(); ++j) {
    Sequence* seq = s.plan.chunks[j].seq;
    if (seq->state == SequenceState::Finished || seq->epoch != s.epoch[j]) continue;
    seq->n_inflight -= s.plan.chunks[j].n_tokens;
    if (error.empty() && s.plan.chunks[j].n_draft == 0) {  // a verify chunk: after it is verified
      blocks->commit(*seq);
      blocks->release_behind_window(*seq);  // a long prompt's chunks: the blocks its window has passed
    }
  }
  int64_t new_tokens = 0;
  if (!error.empty()) {
    for (const ScheduledChunk& c : s.plan.chunks)
      if (c.seq->state != SequenceState::Finished) finish(c.seq, FinishReason::Error, {}, {}, error);
  } else {
    size_t row = 0;
    rows.clear();
    std::vector<std::pair<size_t, size_t>> verifies;  // (chunk, sampling chunk) of the verify chunks
    for (size_t j = 0; j < s.plan.chunks.size(); ++j) {
      const ScheduledChunk& c = s.plan.chunks[j];
      if (!c.sample) continue;
      const size_t i = row++;
      Sequence* seq = c.seq;
      if (seq->state == SequenceState::Finished) continue;  // cancelled, or ended by the step before (a wasted row)
      if (c.n_draft > 0) {
        if (seq->epoch == s.epoch[j]) verifies.push_back({j, i});
        continue;
      }
      SampleRow& r = rows.emplace_back();
      r.seq = seq;
      r.at = s.placeholder_at[i];
      if (device_sampling && s.rows[i].mode == RowMode::Device) {
        r.on_device = true;
        r.token = runner->token(i);
        if (r.token < 0) {
          r.error = seq->matcher ? "grammar: no token of the vocabulary continues the output format here"
                                 : "sampler: every logit is NaN or -inf, nothing to sample";
        } else if (seq->matcher && !seq->matcher->accept_token(r.token)) {
          r.error = fmt::format("grammar: the sampler drew token {}, which the output format does not allow", r.token);
        }
      } else {
        r.logits = runner->logits(i);
      }
    }
    sample_rows(rows, postprocess_pool.get());  // in parallel; the rest in row order
    for (const SampleRow& r : rows) {
      if (r.seq->state == SequenceState::Finished) continue;
      if (!r.error.empty()) {
        finish(r.seq, FinishReason::Error, {}, {}, fmt::format("sampling failed: {}", r.error));
        continue;
      }
      try {
        TokenOutcome out = finish_token(r, *m->tokenizer, m->context);
        ++new_tokens;
        if (out.finished) finish(r.seq, out.reason, out.text, std::move(out.tokens));
      } catch (const std::exception& e) {
        finish(r.seq, FinishReason::Error, {}, {}, fmt::format("sampling failed: {}", e.what()));
      }
    }
    for (const auto& [j, i] : verifies)
      if (s.plan.chunks[j].seq->state != SequenceState::Finished) postprocess_verify(s.plan.chunks[j], i, new_tokens);
  }
  // The step no longer holds its sequences: a finished one that no other launched step names goes now.
  for (const ScheduledChunk& c : s.plan.chunks) {
    Sequence* seq = c.seq;
    --seq->steps_in_flight;
    if (seq->steps_in_flight == 0 && seq->state == SequenceState::Finished) retired.erase(seq->id);
  }
  const auto t4 = Clock::now();
  // A step's time: from the previous step's end (or its own schedule, after an idle engine) to its end.
  const auto began = std::max(s.scheduled, last_completion);
  last_completion = t4;
  publish_stats(std::chrono::duration<double>(t4 - began).count(), new_tokens);
  const bool has_prefill = std::any_of(s.plan.chunks.begin(), s.plan.chunks.end(),
                                       [](const ScheduledChunk& c) { return c.n_tokens > 1 || !c.sample; });
  using Seconds = std::chrono::duration<double>;
  const LlamaModel::StepHostTime host = device_sampling ? m->model->last_step_host_time() : LlamaModel::StepHostTime{};
  profile.add(has_prefill, s.plan.n_tokens, int64_t(s.plan.chunks.size()), s.schedule_s,
              s.launch_s + Seconds(t3 - t2).count(), Seconds(t4 - t3).count(), host.enqueue_s, host.wait_s);
}

void ServingEngine::Impl::run_loop() {
  for (;;) {
    std::deque<std::unique_ptr<Sequence>> incoming;
    bool closed = false, finish_in_flight = true;
    {
      std::unique_lock lock(queue->mu);
      if (live.empty() && launched.empty())
        queue->cv.wait(lock, [&] { return !queue->incoming.empty() || queue->closed || queue->poked; });
      queue->poked = false;
      queue->loop_waiting += int32_t(queue->incoming.size());  // they still count as waiting until admitted
      incoming.swap(queue->incoming);
      closed = queue->closed;
      finish_in_flight = queue->finish_in_flight;
    }
    try {
      for (auto& seq : incoming) {
        Sequence* s = seq.get();
        live.emplace(s->id, std::move(seq));
        s->state = SequenceState::Finished;  // not in the scheduler yet
        if (s->request.max_tokens == 0) {    // nothing to generate: answer at once
          s->usage.prompt_tokens = s->n_prompt;
          finish(s, FinishReason::Length, {}, {});
          continue;
        }
        scheduler->add(s);
      }
      // Cancellations (and every request when shutting down without finishing).
      std::vector<Sequence*> cancelled;
      for (auto& [id, seq] : live)
        if ((closed && !finish_in_flight) || seq->channel->cancel_requested()) cancelled.push_back(seq.get());
      for (Sequence* seq : cancelled) finish(seq, FinishReason::Cancelled, {}, {});
      if (options.check_invariants && !cancelled.empty()) check_invariants();
      if (live.empty()) {
        while (!launched.empty()) complete_oldest();  // rows of requests that ended meanwhile: nothing to send
        publish_stats(0, 0);
        {
          std::lock_guard lock(queue->mu);
          queue->loop_waiting = 0;
        }
        if (closed) {
          std::lock_guard lock(queue->mu);
          if (queue->incoming.empty()) {
            if (debug) fmt::print(stderr, "{}\n", profile.summary());
            return;
          }
        }
        continue;
      }
      step();
    } catch (const std::exception& e) {
      fail_all(fmt::format("engine error: {}", e.what()));
    }
    std::lock_guard lock(queue->mu);
    queue->loop_waiting = int32_t(scheduler->waiting().size());
  }
}

ServingEngine::ServingEngine(const EngineOptions& eo, const ServingOptions& so) : impl_(std::make_unique<Impl>()) {
  validate_options(so);
  Impl& s = *impl_;
  s.options = so;
  s.debug = eo.env.debug_log;
  EngineOptions engine_options = eo;
  engine_options.batch_invariant = eo.batch_invariant || so.batch_invariant;
  // Prompt graphs (engine/model_runner.h): prompt steps padded too, their pad tokens in scratch blocks of their own.
  // Unset: on with CUDA at tp 1 (docs/perf-log.md "## 2026-11-30: prompt-step graphs"; not yet run with tensor
  // parallelism).
  const bool prompt_graphs = eo.prompt_graphs.value_or(eo.device != "cpu" && eo.world() == 1);
  const int32_t scratch_blocks =
      prompt_graphs ? prompt_pad_scratch_blocks(so.max_step_tokens, eo.block_size) : (eo.device == "cpu" ? 0 : 1);
  s.m = load_model(engine_options, [&](const ModelConfig& c, int32_t context) {
    // + the padding's scratch blocks: 1 for decode padding on backends with step graphs, more for prompt padding.
    const int64_t kv_tokens = (so.kv_tokens > 0 ? so.kv_tokens : automatic_kv_tokens(eo, so, c, context)) +
                              int64_t(scratch_blocks) * eo.block_size;
    FERRY_CHECK(kv_tokens >= context, "serving: kv_tokens ({}) must hold at least one context ({} tokens)",
                kv_tokens, context);
    return KvSizing{.kv_tokens = kv_tokens, .max_step_tokens = so.max_step_tokens};
  });
  const KvCacheShape& kv = s.m->model->kv_shape();
  // With step graphs (or prompt padding), the last blocks are the padding's scratch (engine/model_runner.h).
  const bool pad = scratch_blocks > 0 && (s.m->backend->supports_step_graphs() || prompt_graphs) &&
                   kv.n_blocks > scratch_blocks;
  const int32_t n_pool_blocks = pad ? kv.n_blocks - scratch_blocks : kv.n_blocks;
  FERRY_CHECK(int64_t(n_pool_blocks) * kv.block_size >= s.m->context,
              "serving: kv_tokens must hold at least one context ({} tokens) plus one block", s.m->context);
  // A model whose every layer slides a window shorter than the context: the blocks behind it go back to the pool.
  const ModelConfig& mc = s.m->model->config();
  const int32_t window = mc.kv_release_window();
  s.blocks = std::make_unique<BlockManager>(n_pool_blocks, kv.block_size, so.prefix_caching,
                                            window > 0 && window < s.m->context ? window : 0);
  s.scheduler = std::make_unique<Scheduler>(SchedulerLimits{.max_running = so.max_running,
                                                            .max_step_tokens = so.max_step_tokens},
                                            *s.blocks);
  s.runner = std::make_unique<ModelRunner>(
      *s.m->model, StepPadding{.scratch_first = pad ? n_pool_blocks : -1, .n_scratch = pad ? scratch_blocks : 0,
                               .pad_decodes = true, .pad_prompts = pad && prompt_graphs});
  s.m->model->set_prompt_graphs(pad && prompt_graphs);
  s.stats.kv_blocks_total = n_pool_blocks;
  s.device_sampling = so.device_sampling && eo.device_sampling && s.m->model->supports_device_sampling();
  s.async_scheduling = s.device_sampling && so.async_scheduling;
  s.m->model->set_token_feedback(s.async_scheduling);  // before the warm-up: its graphs resolve placeholders
  // Speculation on any backend: verify chunks run as one-row entries, so a step of decode and verify rows is padded
  // and captured like a decode step (engine/model_runner.h). Under --tp / --ep rank 0 proposes (n-gram: host
  // tokens) and the verify step reaches the other ranks as any step does (model/batch_codec.h carries its
  // entries); a draft model runs at world 1 only (its steps would need ranks of their own).
  s.spec_default = eo.spec;
  if (eo.spec.mode != SpecMode::Off) {
    FERRY_CHECK(eo.spec.mode != SpecMode::Draft || eo.world() == 1,
                "serving: a draft model runs at parallel world 1 for now, not --tp {} --ep {} (--spec ngram does)",
                eo.tp, eo.ep);
    FERRY_CHECK(eo.spec.k >= 1 && eo.spec.k <= kMaxSpecTokens, "serving: speculation k must be in 1..{}, got {}",
                kMaxSpecTokens, eo.spec.k);
    if (eo.spec.mode == SpecMode::Draft)
      s.draft = load_draft_model(eo, *s.m, int64_t(n_pool_blocks) * kv.block_size);
  }
  // Tensor parallelism: not yet (its steps are captured on first use, as before; the warm-up has not run there).
  if (pad && so.graph_warmup && s.m->backend->supports_step_graphs() && eo.world() == 1) {
    const auto t0 = Clock::now();
    try {
      s.stats.graph_warmup_steps = s.runner->warm_up_graphs(
          GraphWarmup{.max_seqs = so.max_running,
                      .max_blocks = (s.m->context + kv.block_size - 1) / kv.block_size,
                      .device_sampling = s.device_sampling,
                      .max_graphs = LlamaModel::max_graphs(),
                      .verify_keys = eo.spec.mode != SpecMode::Off});
    } catch (const std::exception& e) {
      fail("serving: recording the step graphs at start failed (ServingOptions::graph_warmup = false, `ferry serve "
           "--no-graph-warmup`, skips it): {}", e.what());
    }
    s.stats.graph_warmup_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  if (const int n = postprocess_threads(eo, so); n > 1) s.postprocess_pool = std::make_unique<ThreadPool>(n);
  s.loop = std::thread([this] { impl_->run_loop(); });
}

ServingEngine::~ServingEngine() { shutdown(false); }

const ModelInfo& ServingEngine::info() const { return impl_->m->info; }
const ServingOptions& ServingEngine::options() const { return impl_->options; }

std::vector<int32_t> ServingEngine::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->m->tokenize(text, add_special, parse_special);
}

std::string ServingEngine::detokenize(std::span<const int32_t> tokens) const {
  return impl_->m->tokenizer->decode(tokens);
}

bool ServingEngine::has_chat_template() const { return impl_->m->chat_template != nullptr; }

std::string ServingEngine::apply_chat_template(const std::vector<ChatTurn>& turns, bool add_generation_prompt) const {
  return impl_->m->apply_chat_template(turns, add_generation_prompt);
}

std::string ServingEngine::render_chat_template(std::string_view context_json) const {
  FERRY_CHECK(impl_->m->chat_template != nullptr, "{}: the model has no chat template", impl_->m->info.path);
  nlohmann::ordered_json context;
  try {
    context = nlohmann::ordered_json::parse(context_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("chat template context: not valid JSON (") + e.what() + ")");
  }
  return impl_->m->chat_template->render(context);
}

std::string ServingEngine::chat_template_source() const {
  return impl_->m->chat_template ? impl_->m->chat_template->source() : std::string();
}

std::shared_ptr<RequestHandle> ServingEngine::submit(GenerationRequest r) {
  Impl& s = *impl_;
  const int32_t context = s.m->context;
  const int32_t vocab = s.m->model->config().vocab_size;
  FERRY_CHECK(!r.prompt.empty(), "prompt: empty (at least one token is needed)");
  FERRY_CHECK(int64_t(r.prompt.size()) < context,
              "prompt: {} tokens do not fit the context of {} tokens (at most {} prompt tokens)", r.prompt.size(),
              context, context - 1);
  for (const int32_t t : r.prompt)
    FERRY_CHECK(t >= 0 && t < vocab, "prompt: token id {} is outside the vocabulary [0, {})", t, vocab);
  r.sampling.validate();
  FERRY_CHECK(r.max_tokens >= 0, "max_tokens: must be >= 0, got {}", r.max_tokens);
  FERRY_CHECK(r.logprobs >= -1 && r.logprobs <= kMaxLogprobs, "logprobs: must be in 0..{} (or -1: none), got {}",
              kMaxLogprobs, r.logprobs);
  FERRY_CHECK(int32_t(r.stop.size()) <= kMaxStopStrings, "stop: at most {} stop strings, got {}", kMaxStopStrings,
              r.stop.size());
  for (const std::string& st : r.stop)
    FERRY_CHECK(!st.empty() && st.size() <= kMaxStopBytes, "stop: each stop string must have 1..{} bytes, got {}",
                kMaxStopBytes, st.size());

  FERRY_CHECK(r.logit_bias.size() <= kMaxLogitBias, "logit_bias: at most {} entries, got {}", kMaxLogitBias,
              r.logit_bias.size());
  for (const auto& [id, bias] : r.logit_bias) {
    FERRY_CHECK(id >= 0 && id < vocab, "logit_bias: token id {} is outside the vocabulary [0, {})", id, vocab);
    FERRY_CHECK(std::isfinite(bias) && bias >= -100.0f && bias <= 100.0f, "logit_bias: bias {} of token {} must be in -100..100", bias, id);
  }
  auto seq = std::make_unique<Sequence>();
  if (r.format.kind != OutputFormatKind::Text) {
    const grammar::ConstraintKind kind = r.format.kind == OutputFormatKind::JsonObject ? grammar::ConstraintKind::JsonObject
                                         : r.format.kind == OutputFormatKind::JsonSchema ? grammar::ConstraintKind::JsonSchema
                                         : r.format.kind == OutputFormatKind::Regex ? grammar::ConstraintKind::Regex
                                                                                    : grammar::ConstraintKind::Gbnf;
    const OutputFormat& f = r.format;
    seq->matcher = std::make_unique<grammar::GrammarMatcher>(
        kind == grammar::ConstraintKind::JsonSchema && is_wrapped(f)
            ? s.grammar_cache().get(grammar::ConstraintKind::Gbnf, wrapped_schema_gbnf(f))
            : s.grammar_cache().get(kind, f.text));
    if (!f.starts_after.empty()) seq->reasoning_gate = std::make_unique<ReasoningGate>(f.starts_after, std::move(seq->matcher));
  } else {
    FERRY_CHECK(r.format.starts_after.empty(), "starts_after: needs an output format (the format is text)");
  }
  const SpecMode spec = r.spec.value_or(s.spec_default.mode);
  FERRY_CHECK(r.spec_k >= 0 && r.spec_k <= kMaxSpecTokens, "spec_k: must be in 0..{} (0: the server's), got {}",
              kMaxSpecTokens, r.spec_k);
  if (spec != SpecMode::Off) {
    FERRY_CHECK(spec != SpecMode::Draft || s.draft, "speculation: this server has no draft model (start it with "
                "--spec draft:MODEL)");
    // Logprobs, logit_bias and formats sample through paths of their own: such requests decode plainly.
    if (r.logprobs < 0 && r.logit_bias.empty() && r.format.kind == OutputFormatKind::Text) {
      if (spec == SpecMode::Ngram) seq->proposer = std::make_unique<NgramProposer>();
      else seq->proposer = std::make_unique<DraftProposer>(*s.draft);
      seq->spec_length.emplace(r.spec_k > 0 ? r.spec_k : s.spec_default.k);
    }
  }
  seq->id = s.next_id.fetch_add(1);
  seq->n_prompt = int32_t(r.prompt.size());
  seq->usage.prompt_tokens = seq->n_prompt;
  seq->tokens = std::move(r.prompt);
  seq->request = std::move(r);
  seq->arrival = Clock::now();
  std::weak_ptr<RequestQueue> weak = s.queue;
  auto channel = std::make_shared<RequestChannel>(seq->id, [weak] {
    if (const auto q = weak.lock()) q->poke();
  });
  seq->channel = channel;
  {
    std::lock_guard lock(s.queue->mu);
    FERRY_CHECK(!s.queue->closed, "serving: the engine is shutting down; no new requests");
    const int64_t waiting = int64_t(s.queue->incoming.size()) + s.queue->loop_waiting;
    if (waiting >= s.options.max_waiting) {
      {
        std::lock_guard stats_lock(s.stats_mu);
        ++s.stats.requests_rejected;
      }
      throw QueueFull(fmt::format("serving: {} requests are waiting (max_waiting {}); retry later", waiting,
                                  s.options.max_waiting));
    }
    s.queue->incoming.push_back(std::move(seq));
  }
  s.queue->cv.notify_all();
  return channel;
}

ServingStats ServingEngine::stats() const {
  const Impl& s = *impl_;
  ServingStats out;
  {
    std::lock_guard lock(s.stats_mu);
    out = s.stats;
  }
  std::lock_guard lock(s.queue->mu);
  out.waiting = int32_t(s.queue->incoming.size()) + s.queue->loop_waiting;
  return out;
}

void ServingEngine::shutdown(bool finish_in_flight) {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.queue->mu);
    if (!s.queue->closed) s.queue->finish_in_flight = finish_in_flight;
    if (!finish_in_flight) s.queue->finish_in_flight = false;  // a later shutdown(false) cancels what is left
    s.queue->closed = true;
  }
  s.queue->cv.notify_all();
  std::lock_guard join_lock(s.join_mu);
  if (s.loop.joinable()) s.loop.join();
}

}  // namespace ferry
