#include "engine/draft_proposer.h"

#include <algorithm>

#include "core/check.h"

namespace ferry {

namespace {

// The greedy token: the largest logit, ties to the lower id (as the sampler's greedy path). logits: (vocab_size).
int32_t argmax(std::span<const float> logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

}  // namespace

std::unique_ptr<DraftModel> load_draft_model(const EngineOptions& target_options, const LoadedModel& target,
                                             int64_t kv_tokens) {
  FERRY_CHECK(!target_options.spec.draft_model.empty(), "--spec draft needs a draft model (--draft MODEL or draft:MODEL)");
  EngineOptions o = target_options;
  o.model_path = target_options.spec.draft_model;
  o.context = target.context;
  o.spec = {};
  o.chat_template.clear();
  auto d = std::make_unique<DraftModel>();
  d->m = load_model(o, [&](const ModelConfig&, int32_t context) {
    return KvSizing{.kv_tokens = std::max<int64_t>(kv_tokens, context),
                    .max_step_tokens = std::min(target_options.max_step_tokens, context)};
  });
  const int32_t v_draft = d->m->model->config().vocab_size, v_target = target.model->config().vocab_size;
  FERRY_CHECK(v_draft == v_target && d->m->tokenizer->vocab_size() == target.tokenizer->vocab_size(),
              "draft model {}: its vocabulary ({} logits, {} tokens) is not the target's ({} logits, {} tokens); "
              "a draft must share the target's tokenizer",
              o.model_path, v_draft, d->m->tokenizer->vocab_size(), v_target, target.tokenizer->vocab_size());
  FERRY_CHECK(d->m->context >= target.context, "draft model {}: its context ({}) is shorter than the target's ({})",
              o.model_path, d->m->context, target.context);
  d->pool = std::make_unique<BlockPool>(d->m->model->kv_shape().n_blocks);
  return d;
}

DraftProposer::DraftProposer(DraftModel& draft) : draft_(draft), session_(*draft.m->model, *draft.pool, draft.m->context) {}

void DraftProposer::propose(std::span<const int32_t> history, int32_t max_tokens, std::vector<int32_t>& out) {
  out.clear();
  // The draft computes history + the first max_tokens - 1 proposals.
  const int32_t room = session_.max_context() - int32_t(history.size()) + 1;
  const int32_t n = std::min(max_tokens, room);
  if (n <= 0 || history.empty()) return;
  const int32_t bs = draft_.m->model->kv_shape().block_size;
  const int32_t need = blocks_for_tokens(int32_t(history.size()) + n - 1, bs);
  // Blocks this sequence's session holds beyond the common prefix come back first; a rough bound is enough here.
  if (need > draft_.pool->n_free() + blocks_for_tokens(session_.n_tokens(), bs)) {
    session_.reset();  // the draft cache is full: give this sequence's blocks back and propose nothing
    return;
  }
  std::span<const float> logits = session_.set_history(history);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t t = argmax(logits);
    out.push_back(t);
    if (i + 1 < n) {
      const int32_t one[1] = {t};
      logits = session_.append(one);
    }
  }
}

}  // namespace ferry
