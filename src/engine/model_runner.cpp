#include "engine/model_runner.h"

#include <algorithm>

#include "core/check.h"

namespace ferry {

void ModelRunner::run(const StepPlan& plan) {
  build_batch(plan);
  device_step_ = false;
  model_.forward(batch_, logits_);
}

void ModelRunner::run_sampled(const StepPlan& plan, std::span<const RowSampling> rows) {
  build_batch(plan);
  device_step_ = true;
  FERRY_ASSERT(rows.size() <= batch_.logit_rows.size());
  row_modes_.assign(rows.begin(), rows.end());
  row_modes_.resize(batch_.logit_rows.size());  // padding rows: Skip
  host_index_.assign(rows.size(), -1);
  int32_t h = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].mode == RowMode::Host) host_index_[i] = h++;
  model_.forward_sampled(batch_, row_modes_, sampled_);
}

int32_t ModelRunner::token(size_t i) const {
  FERRY_ASSERT(device_step_ && i < host_index_.size() && row_modes_[i].mode == RowMode::Device);
  return sampled_.tokens[i];
}

void ModelRunner::build_batch(const StepPlan& plan) {
  const int32_t bs = model_.kv_shape().block_size;
  Batch& b = batch_;
  b.tokens.clear();
  b.positions.clear();
  b.slots.clear();
  b.q_start.clear();
  b.q_len.clear();
  b.kv_len.clear();
  b.logit_rows.clear();
  int32_t mb = 0;
  for (const ScheduledChunk& c : plan.chunks) mb = std::max(mb, int32_t(c.seq->table.blocks.size()));
  b.max_blocks_per_seq = mb;
  b.block_tables.assign(plan.chunks.size() * size_t(mb), -1);
  for (size_t s = 0; s < plan.chunks.size(); ++s) {
    const ScheduledChunk& c = plan.chunks[s];
    const Sequence& seq = *c.seq;
    const int32_t pos0 = seq.n_computed();
    FERRY_ASSERT(c.n_tokens > 0 && pos0 + c.n_tokens <= int32_t(seq.tokens.size()));
    const auto row0 = int32_t(b.tokens.size());
    for (int32_t i = 0; i < c.n_tokens; ++i) {
      const int32_t pos = pos0 + i;
      b.tokens.push_back(seq.tokens[size_t(pos)]);
      b.positions.push_back(pos);
      b.slots.push_back(seq.table.slot(pos, bs));
    }
    b.q_start.push_back(row0);
    b.q_len.push_back(c.n_tokens);
    b.kv_len.push_back(pos0 + c.n_tokens);
    std::copy(seq.table.blocks.begin(), seq.table.blocks.end(), b.block_tables.begin() + ptrdiff_t(s * size_t(mb)));
    if (c.sample) b.logit_rows.push_back(row0 + c.n_tokens - 1);
  }
  // Pad a pure decode step to a power-of-two number of sequences (see the header).
  const bool decode = std::all_of(plan.chunks.begin(), plan.chunks.end(),
                                  [](const ScheduledChunk& c) { return c.n_tokens == 1 && c.sample; });
  if (scratch_block_ >= 0 && decode) {
    size_t padded = 1;
    while (padded < plan.chunks.size()) padded *= 2;
    padded = std::min(padded, size_t(model_.max_step_tokens()));
    for (size_t s = plan.chunks.size(); s < padded; ++s) {
      const auto row = int32_t(b.tokens.size());
      b.tokens.push_back(0);
      b.positions.push_back(0);
      b.slots.push_back(int64_t(scratch_block_) * bs);
      b.q_start.push_back(row);
      b.q_len.push_back(1);
      b.kv_len.push_back(1);
      b.block_tables.resize(b.block_tables.size() + size_t(mb), -1);
      b.block_tables[s * size_t(mb)] = scratch_block_;
      b.logit_rows.push_back(row);
    }
  }
}

std::span<const float> ModelRunner::logits(size_t i) const {
  const auto V = size_t(model_.config().vocab_size);
  if (device_step_) {
    FERRY_ASSERT(i < host_index_.size() && host_index_[i] >= 0);
    return std::span<const float>(sampled_.host_logits).subspan(size_t(host_index_[i]) * V, V);
  }
  FERRY_ASSERT((i + 1) * V <= logits_.size());
  return std::span<const float>(logits_).subspan(i * V, V);
}

}  // namespace ferry
