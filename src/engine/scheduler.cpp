#include "engine/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace ferry {

Scheduler::Scheduler(const SchedulerLimits& limits, BlockManager& blocks) : limits_(limits), blocks_(blocks) {
  FERRY_CHECK(limits.max_running > 0, "serving: max_running must be > 0, got {}", limits.max_running);
  FERRY_CHECK(limits.max_step_tokens >= limits.max_running,
              "serving: max_step_tokens ({}) must be >= max_running ({}) so every running sequence decodes each step",
              limits.max_step_tokens, limits.max_running);
}

void Scheduler::add(Sequence* seq) {
  seq->state = SequenceState::Waiting;
  waiting_.push_back(seq);
}

void Scheduler::remove(Sequence* seq) {
  if (const auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) running_.erase(it);
  if (const auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end()) waiting_.erase(it);
  blocks_.free(*seq);
  seq->state = SequenceState::Finished;
}

void Scheduler::preempt(Sequence* seq) {
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  blocks_.free(*seq);
  seq->state = SequenceState::Waiting;
  waiting_.push_front(seq);
  ++preemptions_;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int32_t budget = limits_.max_step_tokens;

  // 1. Decodes, oldest first; preempt the newest when a block is missing.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    if (seq->n_pending() != 1) {
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (!blocks_.can_append(*seq)) {
      Sequence* victim = running_.back();
      preempt(victim);
      plan.preempted.push_back(victim);
      if (victim == seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // seq was the newest: nothing after it is left
    blocks_.append(*seq);
    plan.chunks.push_back({seq, 1, true});
    budget -= 1;
    ++i;
  }
  // The preempted ones were taken newest first and each pushed to the front: the oldest is at the front now.

  // 1b. Proposals of the decodes (a preempted sequence is no longer in the plan's chunks).
  for (ScheduledChunk& c : plan.chunks) {
    if (budget == 0) break;
    Sequence* seq = c.seq;
    int32_t n = std::min(int32_t(seq->draft.size()), budget);
    while (n > 0 && !blocks_.reserve(*seq, seq->n_computed() + 1 + n)) --n;  // as many as free blocks hold
    if (n == 0) continue;
    c.n_draft = n;
    c.n_tokens = 1 + n;
    budget -= n;
  }

  // 2. Prefill chunks of running sequences (they hold blocks for all their tokens since admission).
  for (Sequence* seq : running_) {
    if (budget == 0) break;
    const int32_t pending = seq->n_pending();
    if (pending <= 1) continue;
    const int32_t n = std::min(pending, budget);
    plan.chunks.push_back({seq, n, n == pending});
    budget -= n;
  }

  // 3. Admissions, in order, while there is room.
  while (plan.preempted.empty() && !waiting_.empty() && budget > 0 &&
         int32_t(running_.size()) < limits_.max_running) {
    Sequence* seq = waiting_.front();
    // A preempted sequence whose last token is still being drawn (asynchronous scheduling) waits for it: its
    // prefix is hashed from its tokens. (Not expected: the engine postprocesses that step before the next plan.)
    if (seq->n_placeholders > 0) break;
    if (!blocks_.allocate(*seq)) break;
    waiting_.pop_front();
    seq->state = SequenceState::Running;
    running_.push_back(seq);
    plan.admitted.push_back(seq);
    const int32_t pending = seq->n_pending();
    const int32_t n = std::min(pending, budget);
    plan.chunks.push_back({seq, n, n == pending});
    budget -= n;
  }
  plan.n_tokens = limits_.max_step_tokens - budget;
  return plan;
}

}  // namespace ferry
