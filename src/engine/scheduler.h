// Scheduler policy: which sequences run in the next step and how many tokens each computes.
//
// One step (under max_step_tokens, at most max_running sequences):
//  1. running sequences that decode (one pending token) get one token each, oldest first. When one needs a new
//     KV block and none is free, the NEWEST running sequence is preempted (its blocks freed, back to the front
//     of the waiting queue; it recomputes prompt + generated tokens later, mostly from the prefix cache) until
//     the block is there or the sequence itself was the newest;
//  1b. decoding sequences with proposals (Sequence::draft) get them verified in the same chunk, oldest first, while
//     the budget lasts and free blocks hold them (proposals never preempt anything): speculative tokens come after
//     every sequence's one certain token but before prefill chunks;
//  2. running sequences still prefilling get chunks of the remaining budget (chunked prefill: a long prompt
//     never stalls the decodes of step 1);
//  3. waiting sequences are admitted in order (first come, first served; none jumps the queue) while a slot,
//     budget and the KV blocks for all their tokens are there (not in a step that preempted: it would thrash).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"

namespace ferry {

struct SchedulerLimits {
  int32_t max_running = 64;
  int32_t max_step_tokens = 512;
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int32_t n_tokens = 0;  // tokens[seq->n_computed() .. + n_tokens) run this step (the proposals past the end)
  bool sample = false;   // the chunk reaches the end of seq->tokens: its last row's logits sample a token
  int32_t n_draft = 0;   // speculation: the chunk is the pending token + seq->draft[0 .. n_draft) (n_tokens =
                         // 1 + n_draft), the logits of every row are returned and verified (spec_verify.h)
  int32_t n_logit_rows() const { return !sample ? 0 : n_draft > 0 ? n_tokens : 1; }
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;  // decodes first, then prefill chunks
  std::vector<Sequence*> preempted;    // sequences preempted while planning (now waiting again)
  std::vector<Sequence*> admitted;     // sequences admitted from the waiting queue this step
  int32_t n_tokens = 0;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerLimits& limits, BlockManager& blocks);

  void add(Sequence* seq);  // to the back of the waiting queue
  StepPlan schedule();
  // Takes a sequence out (finished, cancelled or failed) and gives its blocks back.
  void remove(Sequence* seq);

  const std::deque<Sequence*>& waiting() const { return waiting_; }
  const std::vector<Sequence*>& running() const { return running_; }
  int64_t preemptions() const { return preemptions_; }

 private:
  void preempt(Sequence* seq);

  SchedulerLimits limits_;
  BlockManager& blocks_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order: the back is the newest
  int64_t preemptions_ = 0;
};

}  // namespace ferry
