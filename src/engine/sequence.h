// One request inside the serving engine loop: its tokens (prompt + generated), its KV blocks, its sampler and
// text stream, and its output channel. Owned by the loop; the scheduler and the runner hold plain pointers.
//
// The sequence's work is uniform: compute tokens[n_computed() .. tokens.size()) (a prompt, a prompt chunk, one
// decode token, or everything again after a preemption); when a step reaches the end, its last row's logits
// sample the next token, which is appended to `tokens` and computed by the next step.
//
// Asynchronous scheduling (engine/serving_engine.cpp) launches step k+1 before step k's tokens reach the host. At
// launch a step advances table.n_tokens over its chunks (their K/V are being written: n_inflight of them are not
// yet complete) and appends a placeholder -(row + 1) for each token it draws on the device, so the next step can
// already compute that token: its id is filled in on the device (Backend::resolve_placeholders) and on the host
// when step k is postprocessed. Only completed tokens are hashed into the prefix cache.
//
// Speculative decoding: a decoding sequence's chunk may run its pending token and n_draft proposals (`draft`); it
// advances table.n_tokens over all of them at launch, and its postprocess keeps the K/V of the accepted ones
// only (BlockManager::truncate): the table's count steps back and whole blocks of rejected tokens are released.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/proposer.h"
#include "engine/request_channel.h"
#include "engine/spec_verify.h"
#include "engine/reasoning_gate.h"
#include "grammar/matcher.h"
#include "sampling/sampler.h"
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
  int32_t n_inflight = 0;       // of table.n_tokens: tokens whose K/V a launched step is still writing
  int32_t n_placeholders = 0;   // entries of `tokens` that are placeholders (< 0) of tokens being drawn
  int32_t steps_in_flight = 0;  // launched, not yet postprocessed steps holding a chunk of this sequence
  // Structured output (request.format): the matcher's state after the tokens generated so far, the mask of the
  // next draw ((ceil(vocab_size / 64),) bits; computed while the device runs the step when mask_ready) and the
  // masked logits ((vocab_size) f32, disallowed tokens at -inf).
  std::unique_ptr<grammar::GrammarMatcher> matcher;
  // request.format.starts_after: the matcher waits here until the reasoning has ended (matcher null till then).
  std::unique_ptr<ReasoningGate> reasoning_gate;
  std::vector<uint64_t> grammar_mask;
  bool grammar_mask_ready = false;
  std::vector<float> masked_logits;
  // Speculative decoding (request.spec): the proposer (null: plain decoding), the proposal length, and the
  // proposals of the next step: they follow `tokens` (not in it); a scheduled chunk verifies its n_draft first ones
  // (ScheduledChunk), its K/V written after the pending token's, and keeps what the target draws itself.
  std::unique_ptr<Proposer> proposer;
  std::optional<SpecLength> spec_length;
  std::vector<int32_t> draft;
  uint32_t epoch = 0;           // bumped when the block table is reset (preemption): a step launched before
                                // must not advance the new table

  int32_t n_computed() const { return table.n_tokens; }
  int32_t n_pending() const { return int32_t(tokens.size()) - table.n_tokens; }  // tokens to compute
};

}  // namespace ferry
