#include "engine/model_runner.h"

#include <algorithm>

#include "core/check.h"

namespace ferry {

namespace {

size_t pow2_at_least(size_t x) {
  size_t p = 1;
  while (p < x) p *= 2;
  return p;
}

}  // namespace

int32_t prompt_pad_scratch_blocks(int32_t max_step_tokens, int32_t block_size, int32_t granule) {
  FERRY_CHECK(max_step_tokens >= 1 && block_size >= 1 && granule >= 1,
              "prompt padding: step budget {}, block size {}, granule {} must be positive", max_step_tokens,
              block_size, granule);
  const int32_t max_pad = std::min(granule, max_step_tokens) - 1;  // N - n < granule and N <= budget, n >= 1
  return std::max(1, (max_pad + block_size - 1) / block_size);
}

ModelRunner::ModelRunner(LlamaModel& model, const StepPadding& padding) : model_(model), padding_(padding) {
  FERRY_CHECK(padding.scratch_first < 0 || (padding.n_scratch >= 1 && padding.granule >= 1),
              "step padding: {} scratch blocks, granule {}", padding.n_scratch, padding.granule);
}

void ModelRunner::run(const StepPlan& plan) {
  build_batch(plan);
  device_step_ = false;
  model_.forward(batch_, logits_);
}

void ModelRunner::launch_sampled(const StepPlan& plan, std::span<const RowSampling> rows) {
  build_batch(plan);
  FERRY_ASSERT(rows.size() + 1 == first_logit_row_.size());
  // One setting per logit row: a verify chunk's rows all take its setting (Host); padding rows Skip.
  row_modes_.assign(batch_.logit_rows.size(), RowSampling{});
  LaunchedRows launched{.host_index = std::vector<int32_t>(rows.size(), -1), .logit_row = first_logit_row_};
  int32_t h = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto first = size_t(first_logit_row_[i]), n = size_t(first_logit_row_[i + 1]) - first;
    FERRY_CHECK(n == 1 || rows[i].mode == RowMode::Host, "speculative decoding: a verify chunk's rows go to the host");
    if (rows[i].mode == RowMode::Host) launched.host_index[i] = h;
    for (size_t r = 0; r < n; ++r) row_modes_[first + r] = rows[i];
    if (rows[i].mode == RowMode::Host) h += int32_t(n);
  }
  model_.launch_sampled(batch_, row_modes_);
  launched_.push_back(std::move(launched));
}

void ModelRunner::seal(std::span<const std::span<const uint64_t>> masks) {
  FERRY_CHECK(!launched_.empty(), "ModelRunner::seal: no step was launched");
  const std::vector<int32_t>& first = launched_.back().logit_row;
  FERRY_ASSERT(masks.size() + 1 == first.size());
  row_masks_.assign(row_modes_.size(), {});
  for (size_t i = 0; i < masks.size(); ++i) row_masks_[size_t(first[i])] = masks[i];  // a Device row: one logit row
  model_.seal_sampled(row_masks_);
}

void ModelRunner::collect() {
  FERRY_CHECK(!launched_.empty(), "ModelRunner::collect: no step was launched");
  host_index_ = std::move(launched_.front().host_index);
  token_row_ = std::move(launched_.front().logit_row);
  launched_.pop_front();
  device_step_ = true;
  model_.collect_sampled(sampled_);  // pops the model's oldest step even when it throws
}

int32_t ModelRunner::token(size_t i) const {
  FERRY_ASSERT(device_step_ && i < host_index_.size() && host_index_[i] < 0);
  return sampled_.tokens[size_t(token_row_[i])];
}

void ModelRunner::build_batch(const StepPlan& plan) {
  const int32_t bs = model_.kv_shape().block_size;
  Batch& b = batch_;
  b = Batch{};
  first_logit_row_.clear();
  int32_t mb = 0;
  for (const ScheduledChunk& c : plan.chunks) mb = std::max(mb, int32_t(c.seq->table.blocks.size()));
  b.max_blocks_per_seq = mb;
  std::vector<int32_t> tokens;  // a verify chunk's rows
  std::vector<int64_t> slots;
  for (const ScheduledChunk& c : plan.chunks) {
    const Sequence& seq = *c.seq;
    const int32_t pos0 = seq.n_computed();
    const auto n_known = int32_t(seq.tokens.size());
    FERRY_ASSERT(c.n_tokens > 0 && pos0 + c.n_tokens <= n_known + c.n_draft && c.n_draft <= int32_t(seq.draft.size()));
    FERRY_ASSERT(c.n_draft == 0 || (c.sample && pos0 + 1 == n_known && c.n_tokens == 1 + c.n_draft));
    if (c.sample) first_logit_row_.push_back(int32_t(b.logit_rows.size()));
    if (c.n_draft > 0) {  // the last token and the proposals: one-row entries (model/batch.h)
      tokens.assign(1, seq.tokens[size_t(pos0)]);
      tokens.insert(tokens.end(), seq.draft.begin(), seq.draft.begin() + c.n_draft);
      slots.resize(tokens.size());
      for (size_t i = 0; i < tokens.size(); ++i) slots[i] = seq.table.slot(pos0 + int32_t(i), bs);
      verify_entries(b, tokens, pos0, slots, seq.table.blocks);
      continue;
    }
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
    b.block_tables.resize(b.block_tables.size() + size_t(mb), -1);
    std::copy(seq.table.blocks.begin(), seq.table.blocks.end(), b.block_tables.end() - ptrdiff_t(mb));
    if (c.sample) b.logit_rows.push_back(row0 + c.n_tokens - 1);
  }
  first_logit_row_.push_back(int32_t(b.logit_rows.size()));  // the end of the real rows
  if (padding_.scratch_first < 0 || plan.chunks.empty()) return;
  // Decode-shaped: every entry one sampled row (decode chunks and verify chunks' one-row entries), padded like a
  // decode step (its graph key has rows_share_kv beside: model/llama_model.h). Else prompt padding, where a verify
  // chunk's entries count as sequences (one logit row each, as the padding assumes).
  const bool decode = std::all_of(plan.chunks.begin(), plan.chunks.end(), [](const ScheduledChunk& c) {
    return c.sample && (c.n_tokens == 1 || c.n_draft > 0);
  });
  if (decode && padding_.pad_decodes) pad_decode_step(size_t(b.n_seqs()));
  if (!decode && padding_.pad_prompts) pad_prompt_step(size_t(b.n_seqs()));
}

void ModelRunner::pad_decode_step(size_t n_chunks) {
  // A pure decode step to a power-of-two number of sequences (see the header).
  const int32_t bs = model_.kv_shape().block_size;
  Batch& b = batch_;
  const size_t mb = size_t(b.max_blocks_per_seq);
  const size_t padded = std::min(pow2_at_least(n_chunks), size_t(model_.max_step_tokens()));
  for (size_t s = n_chunks; s < padded; ++s) {
    const auto row = int32_t(b.tokens.size());
    b.tokens.push_back(0);
    b.positions.push_back(0);
    b.slots.push_back(int64_t(padding_.scratch_first) * bs);
    b.q_start.push_back(row);
    b.q_len.push_back(1);
    b.kv_len.push_back(1);
    b.block_tables.resize(b.block_tables.size() + mb, -1);
    b.block_tables[s * mb] = padding_.scratch_first;
    b.logit_rows.push_back(row);
  }
}

void ModelRunner::pad_prompt_step(size_t n_chunks) {
  const int32_t bs = model_.kv_shape().block_size;
  Batch& b = batch_;
  const int32_t n = b.n_tokens(), g = padding_.granule;
  const int32_t n_padded = std::min((n + g - 1) / g * g, model_.max_step_tokens());
  const int32_t pad = std::max(0, n_padded - n);
  const int32_t pad_blocks = (pad + bs - 1) / bs;
  if (pad_blocks > padding_.n_scratch) return;  // more than the reserved scratch holds: run unpadded
  const size_t n_seqs = pow2_at_least(n_chunks + (pad > 0 ? 1 : 0));
  // Widen the tables for the pad sequence's blocks (rows re-laid at the new stride).
  const int32_t old_mb = b.max_blocks_per_seq, mb = std::max(old_mb, pad_blocks);
  if (mb != old_mb) {
    std::vector<int32_t> wide(n_chunks * size_t(mb), -1);
    for (size_t s = 0; s < n_chunks; ++s)
      std::copy_n(b.block_tables.begin() + ptrdiff_t(s * size_t(old_mb)), old_mb, wide.begin() + ptrdiff_t(s * size_t(mb)));
    b.block_tables = std::move(wide);
    b.max_blocks_per_seq = mb;
  }
  b.block_tables.resize(n_seqs * size_t(mb), -1);
  size_t s = n_chunks;
  if (pad > 0) {  // one dummy sequence with the pad tokens at positions 0..pad-1 in the scratch blocks
    b.q_start.push_back(n);
    b.q_len.push_back(pad);
    b.kv_len.push_back(pad);
    for (int32_t i = 0; i < pad; ++i) {
      b.tokens.push_back(0);
      b.positions.push_back(i);
      b.slots.push_back(int64_t(padding_.scratch_first + i / bs) * bs + i % bs);
    }
    for (int32_t k = 0; k < pad_blocks; ++k) b.block_tables[s * size_t(mb) + size_t(k)] = padding_.scratch_first + k;
    ++s;
  }
  for (; s < n_seqs; ++s) {  // empty dummies: no token, no key, no block
    b.q_start.push_back(n_padded);
    b.q_len.push_back(0);
    b.kv_len.push_back(0);
  }
  b.logit_rows.resize(n_seqs, n_padded - 1);
  FERRY_ASSERT(b.n_tokens() == n_padded && b.n_seqs() == int32_t(n_seqs));
}

bool ModelRunner::build_dummy_step(int32_t n, int32_t n_seqs, int32_t mb, bool decode) {
  // Every row is token 0; sequence s holds q_len[s] of the n tokens at positions 0.. (at most mb blocks' worth)
  // and its table cycles through the scratch blocks, as do its slots (dummy rows may share slots: their keys and
  // values are never read by a real sequence). Sequences past the tokens are empty (q_len = kv_len = 0).
  const int32_t bs = model_.kv_shape().block_size;
  const int32_t per_seq = mb * bs;
  if (int64_t(per_seq) * n_seqs < n || n_seqs > n || (decode && n != n_seqs)) return false;
  Batch& b = batch_;
  b = Batch{};
  b.max_blocks_per_seq = mb;
  b.block_tables.assign(size_t(n_seqs) * size_t(mb), -1);
  int32_t left = n;
  for (int32_t s = 0; s < n_seqs; ++s) {
    // decode: one token each; else the first sequences take as many as their tables hold, the rest stay empty
    const int32_t q = decode ? 1 : std::min(left, per_seq);
    const auto row0 = int32_t(b.tokens.size());
    for (int32_t i = 0; i < q; ++i) {
      b.tokens.push_back(0);
      b.positions.push_back(i);
      b.slots.push_back(int64_t(padding_.scratch_first + (i / bs) % padding_.n_scratch) * bs + i % bs);
    }
    for (int32_t j = 0; j < (q + bs - 1) / bs; ++j)
      b.block_tables[size_t(s) * size_t(mb) + size_t(j)] = padding_.scratch_first + j % padding_.n_scratch;
    b.q_start.push_back(q > 0 ? row0 : n);
    b.q_len.push_back(q);
    b.kv_len.push_back(q);
    b.logit_rows.push_back(q > 0 ? row0 + q - 1 : n - 1);
    left -= q;
  }
  FERRY_ASSERT(left == 0 && b.n_tokens() == n);
  // A prompt key needs a sequence that is not one token (else the model takes the step for a decode step).
  return decode || std::any_of(b.q_len.begin(), b.q_len.end(), [](int32_t q) { return q != 1; });
}

void ModelRunner::run_dummy_step(bool device_sampling) {
  device_step_ = device_sampling;
  host_index_.clear();
  if (device_sampling) {
    row_modes_.assign(batch_.logit_rows.size(), RowSampling{});  // every row Skip
    model_.forward_sampled(batch_, row_modes_, sampled_);
  } else {
    model_.forward(batch_, logits_);
  }
}

int32_t ModelRunner::warm_up_graphs(const GraphWarmup& w) {
  FERRY_CHECK(padding_.scratch_first >= 0, "step-graph warm-up needs the padding's scratch blocks");
  const int32_t budget = model_.max_step_tokens();
  const auto max_decode = int32_t(std::min(pow2_at_least(size_t(std::max(1, w.max_seqs))), size_t(budget)));
  const auto max_prompt = int32_t(std::min(pow2_at_least(size_t(std::max(1, w.max_seqs)) + 1), size_t(budget)));
  const auto max_mb = int32_t(pow2_at_least(size_t(std::max(1, w.max_blocks))));
  int32_t steps = 0;
  for (int32_t mb = 1; mb <= max_mb; mb *= 2) {
    for (int32_t p = 1; p <= max_decode && steps < w.max_graphs; p *= 2) {
      if (!padding_.pad_decodes || !build_dummy_step(p, p, mb, true)) continue;
      run_dummy_step(w.device_sampling);
      ++steps;
      if (!w.verify_keys || p == 1 || steps >= w.max_graphs) continue;
      batch_.rows_share_kv = true;  // the same shape as a verify step's (two entries at least)
      run_dummy_step(w.device_sampling);
      ++steps;
    }
    for (int32_t p = 1; p <= max_prompt && steps < w.max_graphs; p *= 2) {
      if (!padding_.pad_prompts || !build_dummy_step(budget, p, mb, false)) continue;
      run_dummy_step(w.device_sampling);
      ++steps;
    }
  }
  return steps;
}

std::span<const float> ModelRunner::logits(size_t i, size_t r) const {
  const auto V = size_t(model_.config().vocab_size);
  if (device_step_) {
    FERRY_ASSERT(i < host_index_.size() && host_index_[i] >= 0);
    return std::span<const float>(sampled_.host_logits).subspan((size_t(host_index_[i]) + r) * V, V);
  }
  FERRY_ASSERT(i + 1 < first_logit_row_.size() && first_logit_row_[i] + int32_t(r) < first_logit_row_[i + 1]);
  i = size_t(first_logit_row_[i]) + r;
  FERRY_ASSERT((i + 1) * V <= logits_.size());
  return std::span<const float>(logits_).subspan(i * V, V);
}

}  // namespace ferry
