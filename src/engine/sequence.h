// One request inside the serving engine loop: its tokens (prompt + generated), its KV blocks, its sampler and
// text stream, and its output channel. Owned by the loop; the scheduler and the runner hold plain pointers.
//
// The sequence's work is uniform: compute tokens[n_computed() .. tokens.size()) (a prompt, a prompt chunk, one
// decode token, or everything again after a preemption); when a step reaches the end, its last row's logits
// sample the next token, which is appended to `tokens` and computed by the next step.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/request_channel.h"
#include "engine/sampler.h"
#include "engine/text_stream.h"
#include "ferry/serving.h"
#include "kv/block_table.h"

namespace ferry {

enum class SequenceState { Waiting, Running, Finished };

struct Sequence {
  uint64_t id = 0;
  GenerationRequest request;                 // request.prompt is moved into tokens
  std::vector<int32_t> tokens;               // prompt + generated; the last one may not be computed yet
  int32_t n_prompt = 0;                      // the original prompt's length
  int32_t n_generated = 0;                   // tokens sampled (end-of-generation tokens included)
  BlockTable table;                          // table.n_tokens: tokens whose K/V are stored
  std::vector<uint64_t> block_hashes;        // chained prefix hash of each full computed block, in order
  std::optional<Sampler> sampler;            // made at first admission (owns vocab-sized buffers)
  std::optional<TextStream> text;
  std::shared_ptr<RequestChannel> channel;
  SequenceState state = SequenceState::Waiting;
  bool admitted_once = false;
  RequestUsage usage;
  std::chrono::steady_clock::time_point arrival;

  int32_t n_computed() const { return table.n_tokens; }
  int32_t n_pending() const { return int32_t(tokens.size()) - table.n_tokens; }  // tokens to compute
};

}  // namespace ferry
