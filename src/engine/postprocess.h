// The postprocess half of a serving step for one sequence whose chunk produced logits: sample the next token
// with the request's own Sampler, compute logprobs from the raw logits, stream its text (stop strings held
// back), and decide whether the request is finished (end-of-generation token, stop string, max_tokens,
// context full). Posts the update to the request's channel unless it finished (the caller finishes it).
//
// Two halves, so that a step's rows can sample in parallel: sample_rows (the sampler and logprobs: touches
// only each row's own Sequence.sampler and reads its tokens; rows are independent and each has its own seed,
// so the result is the same in any order or thread) and finish_token (detokenize, stop strings, posting:
// serial, in row order).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/logprobs.h"
#include "engine/sequence.h"
#include "tokenizer/tokenizer.h"

namespace ferry {

struct TokenOutcome {
  bool finished = false;
  FinishReason reason = FinishReason::Length;
  std::string text;                     // the last text to send with the final update
  std::vector<GeneratedToken> tokens;   // the last tokens to send with the final update
};

// One row of a step to sample: the input (seq, logits: (vocab_size) f32) and what sample_rows made of it.
struct SampleRow {
  Sequence* seq = nullptr;
  std::span<const float> logits;  // empty when on_device
  bool on_device = false;         // the token was drawn on the device (sample_rows leaves the row alone)
  int32_t at = -1;                // asynchronous scheduling: the index of the token's placeholder in seq->tokens
                                  // (finish_token writes it there); -1: the token is appended
  int32_t token = -1;
  bool has_logprobs = false;  // seq->request.logprobs >= 0
  TokenLogprobs logprobs;     // from the raw logits, when has_logprobs
  std::string error;          // non-empty: sampling failed (every logit NaN/-inf); the caller fails the request
};

// Structured output: seq.grammar_mask for the next draw (seq.matcher set; vocab_size logits). Thread-safe
// across sequences (a matcher per sequence; the shared mask cache locks).
void compute_grammar_mask(Sequence& seq, size_t vocab_size);
// The logits with the request's logit_bias added and (structured output) the tokens the mask disallows at -inf
// (the mask is computed first unless ready). Throws ferry::Error when the format allows no token.
std::span<const float> adjusted_logits(Sequence& seq, std::span<const float> logits);

// Samples every row not on_device (and computes its logprobs), spread over pool's threads (nullptr or size 1:
// in order on this thread). Never throws for a row's error: it is stored in that row.
void sample_rows(std::span<SampleRow> rows, ThreadPool* pool);

// The serial half for one sampled row: the rest of postprocess_token.
TokenOutcome finish_token(const SampleRow& row, const Tokenizer& tokenizer, int32_t context);

// Both halves for one sequence. logits: (vocab_size) f32, the raw logits after seq.tokens. context: the per-sequence token limit.
// Throws ferry::Error when the logits cannot be sampled (every one NaN/-inf): the caller fails the request.
TokenOutcome postprocess_token(Sequence& seq, std::span<const float> logits, const Tokenizer& tokenizer,
                               int32_t context);

}  // namespace ferry
