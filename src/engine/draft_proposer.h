// Draft-model proposals: a smaller model sharing the target's tokenizer (the same vocabulary) runs on the same
// backend kind with its own paged KV cache (DraftModel: the loaded model and its block pool, shared by the
// sequences of one engine) and proposes its greedy continuation, k draft steps per verify step. Each sequence's
// DraftProposer keeps its draft history in a Session: the next call keeps the common prefix (the accepted
// tokens) and computes only what changed, so rejected draft tokens are dropped as the target's are.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "engine/loaded_model.h"
#include "engine/proposer.h"
#include "engine/session.h"
#include "kv/block_pool.h"

namespace ferry {

struct DraftModel {
  std::unique_ptr<LoadedModel> m;
  std::unique_ptr<BlockPool> pool;  // the draft's KV blocks, for every sequence that drafts
};

// Loads spec.draft_model with target_options' device, threads and context, its cache holding kv_tokens (at least
// one context). ferry::Error when the draft's vocabulary is not the target's.
std::unique_ptr<DraftModel> load_draft_model(const EngineOptions& target_options, const LoadedModel& target,
                                             int64_t kv_tokens);

class DraftProposer final : public Proposer {
 public:
  explicit DraftProposer(DraftModel& draft);
  // Proposes nothing when the draft cache is full (the sequence decodes plainly this step) or the context is.
  void propose(std::span<const int32_t> history, int32_t max_tokens, std::vector<int32_t>& out) override;
  std::string_view name() const override { return "draft"; }

 private:
  DraftModel& draft_;
  Session session_;
};

}  // namespace ferry
