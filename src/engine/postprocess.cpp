#include "engine/postprocess.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "engine/logprobs.h"
#include "sampling/token_mask.h"

namespace ferry {

namespace {

TokenLogprobOut logprob_out(const TokenLogprob& lp, const Tokenizer& tokenizer) {
  return {lp.id, tokenizer.token_to_piece(lp.id), lp.logprob};
}

}  // namespace

void compute_grammar_mask(Sequence& seq, size_t vocab_size) {
  seq.grammar_mask.resize((vocab_size + 63) / 64);
  seq.matcher->fill_mask(seq.grammar_mask);
  seq.grammar_mask_ready = true;
}

std::span<const float> adjusted_logits(Sequence& seq, std::span<const float> logits) {
  if (!seq.matcher) {
    seq.masked_logits.assign(logits.begin(), logits.end());
    if (seq.reasoning_gate) seq.reasoning_gate->restrict(seq.masked_logits);
    for (const auto& [id, bias] : seq.request.logit_bias) seq.masked_logits[size_t(id)] += bias;  // -inf stays
    return seq.masked_logits;
  }
  if (!seq.grammar_mask_ready) compute_grammar_mask(seq, logits.size());
  seq.grammar_mask_ready = false;
  seq.masked_logits.assign(logits.begin(), logits.end());
  const bool any = apply_token_mask(seq.masked_logits, seq.grammar_mask);
  FERRY_CHECK(any, "grammar: no token of the vocabulary continues the output format here");
  for (const auto& [id, bias] : seq.request.logit_bias) seq.masked_logits[size_t(id)] += bias;  // -inf stays
  return seq.masked_logits;
}

void sample_rows(std::span<SampleRow> rows, ThreadPool* pool) {
  // The rows left to the host sampler (rows drawn on the device are done).
  size_t n_host = 0;
  for (const SampleRow& r : rows) n_host += r.on_device ? 0 : 1;
  std::vector<SampleRow*> host;
  if (n_host != rows.size()) {
    host.reserve(n_host);
    for (SampleRow& r : rows)
      if (!r.on_device) host.push_back(&r);
  }
  auto one = [&](int64_t i) {
    SampleRow& r = host.empty() ? rows[size_t(i)] : *host[size_t(i)];
    try {
      Sequence& seq = *r.seq;
      if (seq.matcher || seq.reasoning_gate || !seq.request.logit_bias.empty()) {
        r.token = seq.sampler->sample(adjusted_logits(seq, r.logits), seq.tokens);
        FERRY_CHECK(!seq.matcher || seq.matcher->accept_token(r.token),
                    "grammar: the sampler drew token {}, which the output format does not allow", r.token);
      } else {
        r.token = seq.sampler->sample(r.logits, seq.tokens);
      }
      r.has_logprobs = seq.request.logprobs >= 0;
      if (r.has_logprobs) r.logprobs = token_logprobs(r.logits, r.token, seq.request.logprobs);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
  };
  if (pool == nullptr || pool->size() <= 1 || n_host <= 1) {
    for (size_t i = 0; i < n_host; ++i) one(int64_t(i));
  } else {
    pool->run_chunks(int64_t(n_host), one);  // one row per chunk: ~20-100 us each on a 128k vocabulary
  }
}

TokenOutcome finish_token(const SampleRow& row, const Tokenizer& tokenizer, int32_t context) {
  Sequence& seq = *row.seq;
  TokenOutcome out;
  const GenerationRequest& req = seq.request;
  const int32_t tok = row.token;
  ++seq.n_generated;
  if (row.at >= 0) {  // a placeholder: the token is filled in (or, at an end-of-generation token, the request ends)
    FERRY_ASSERT(size_t(row.at) < seq.tokens.size() && seq.tokens[size_t(row.at)] < 0 && seq.n_placeholders > 0);
    --seq.n_placeholders;
  }
  if ((!req.ignore_eos || (seq.matcher && seq.matcher->is_terminated())) && tokenizer.is_eog(tok)) {  // the end-of-generation token itself is not output
    out.finished = true;
    out.reason = FinishReason::Stop;
    out.text = seq.text->finish();
    return out;
  }
  if (row.at >= 0) {
    seq.tokens[size_t(row.at)] = tok;
  } else {
    seq.tokens.push_back(tok);
  }
  const int32_t length = row.at >= 0 ? row.at + 1 : int32_t(seq.tokens.size());  // tokens up to this one
  seq.usage.completion_tokens += 1;
  GeneratedToken g;
  g.id = tok;
  if (row.has_logprobs) {
    g.chosen = logprob_out(row.logprobs.chosen, tokenizer);
    for (const TokenLogprob& t : row.logprobs.top) g.top.push_back(logprob_out(t, tokenizer));
  } else {
    g.chosen.id = tok;
  }
  out.tokens.push_back(std::move(g));
  out.text = seq.text->push(tok);
  if (seq.reasoning_gate) {  // the reasoning ended with this token: the format applies from here
    if (auto matcher = seq.reasoning_gate->push(tokenizer.token_to_piece(tok))) {
      seq.matcher = std::move(matcher);
      seq.reasoning_gate.reset();
    }
  }
  if (seq.text->stopped()) {
    out.finished = true;
    out.reason = FinishReason::Stop;
  } else if (seq.matcher && seq.matcher->must_stop()) {  // the format is complete and nothing can follow
    out.text += seq.text->finish();
    out.finished = true;
    out.reason = FinishReason::Stop;
  } else if (seq.usage.completion_tokens >= req.max_tokens || length > context) {
    // max_tokens reached, or the new token cannot be computed within the context: nothing more can follow.
    out.text += seq.text->finish();
    out.finished = true;
    out.reason = seq.text->stopped() ? FinishReason::Stop : FinishReason::Length;
  }
  if (!out.finished) {
    seq.channel->post(out.text, std::move(out.tokens), seq.usage);
    out.text.clear();
    out.tokens.clear();
  }
  return out;
}

TokenOutcome postprocess_token(Sequence& seq, std::span<const float> logits, const Tokenizer& tokenizer,
                               int32_t context) {
  SampleRow row;
  row.seq = &seq;
  row.logits = logits;
  sample_rows(std::span(&row, 1), nullptr);
  if (!row.error.empty()) fail("{}", row.error);
  return finish_token(row, tokenizer, context);
}

}  // namespace ferry
