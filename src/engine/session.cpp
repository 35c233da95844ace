#include "engine/session.h"

#include <algorithm>

#include "core/check.h"

namespace ferry {

Session::Session(LlamaModel& model, BlockPool& pool, int32_t max_context)
    : model_(model), pool_(pool), max_context_(max_context) {}

Session::~Session() {
  // A decode step still in flight writes its K/V row into this table's blocks: collect it before the blocks go back
  // to the pool (generate() drops its steps itself; only a failure inside that drop leaves one here).
  try {
    while (!inflight_.empty()) collect_decode();
  } catch (...) {  // a destructor does not throw: the failed step's error was the one reported
  }
  table_.release_all(pool_);
}

void Session::reset() {
  drop_decode();
  table_.release_all(pool_);
  history_.clear();
}

void Session::truncate(int32_t n_keep) {
  FERRY_CHECK(n_keep >= 0 && n_keep <= n_tokens(), "truncate: {} tokens of a history of {}", n_keep, n_tokens());
  const int32_t bs = model_.kv_shape().block_size;
  const int32_t keep_blocks = blocks_for_tokens(n_keep, bs);
  while (int32_t(table_.blocks.size()) > keep_blocks) {
    pool_.release(table_.blocks.back());
    table_.blocks.pop_back();
  }
  table_.n_tokens = n_keep;
  history_.resize(size_t(n_keep));
}

size_t Session::common_prefix_to_keep(std::span<const int32_t> tokens) const {
  FERRY_CHECK(!tokens.empty(), "empty prompt");
  size_t common = 0;
  while (common < history_.size() && common < tokens.size() && history_[common] == tokens[common]) ++common;
  // Recompute at least the last token so that its logits exist.
  return std::min(common, tokens.size() - 1);
}

std::span<const float> Session::set_history(std::span<const int32_t> tokens) {
  const size_t common = common_prefix_to_keep(tokens);
  truncate(int32_t(common));
  return append(tokens.subspan(common));
}

int32_t Session::set_history_sampled(std::span<const int32_t> tokens, const SamplingParams& params) {
  const size_t common = common_prefix_to_keep(tokens);
  truncate(int32_t(common));
  return append_sampled(tokens.subspan(common), params);
}

int32_t Session::append_sampled(std::span<const int32_t> tokens, const SamplingParams& params) {
  return run(tokens, false, last_logits_, &params);
}

std::span<const float> Session::append(std::span<const int32_t> tokens) {
  run(tokens, false, last_logits_);
  return last_logits_;
}

void Session::append_all_logits(std::span<const int32_t> tokens, std::vector<float>& logits) {
  run(tokens, true, logits);
}

void Session::fill_verify_batch(std::span<const int32_t> tokens) {
  FERRY_CHECK(!tokens.empty() && int64_t(tokens.size()) <= model_.max_step_tokens(),
              "verify step of {} tokens (1..{} allowed)", tokens.size(), model_.max_step_tokens());
  FERRY_CHECK(inflight_.empty(), "{} decode steps are in flight: collect or drop them first", inflight_.size());
  const int32_t pos0 = n_tokens();
  FERRY_CHECK(int64_t(pos0) + int64_t(tokens.size()) <= max_context_, "{} tokens do not fit the context of {} tokens "
              "({} already in it)", tokens.size(), max_context_, pos0);
  for (int32_t t : tokens)
    FERRY_CHECK(t >= 0 && t < model_.config().vocab_size, "token id {} out of range (vocabulary of {})", t,
                model_.config().vocab_size);
  reserve_kv(pos0 + int32_t(tokens.size()));
  const int32_t bs = model_.kv_shape().block_size;
  std::vector<int64_t> slots(tokens.size());  // (n) the rows' KV slots
  for (size_t i = 0; i < tokens.size(); ++i) slots[i] = table_.slot(pos0 + int32_t(i), bs);
  batch_ = Batch{};
  batch_.max_blocks_per_seq = int32_t(table_.blocks.size());
  verify_entries(batch_, tokens, pos0, slots, table_.blocks);
}

void Session::verify(std::span<const int32_t> tokens, std::vector<float>& logits) {
  fill_verify_batch(tokens);
  model_.forward(batch_, logits);
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  table_.n_tokens = int32_t(history_.size());
}

void Session::verify_sampled(std::span<const int32_t> tokens, const SamplingParams& params, std::vector<int32_t>& ids) {
  fill_verify_batch(tokens);
  const auto pos0 = uint64_t(n_tokens());
  verify_rows_.resize(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    verify_rows_[i] = RowSampling{.mode = RowMode::Device, .params = params, .position = pos0 + i + 1};
  model_.forward_sampled(batch_, verify_rows_, sampled_);
  ids.assign(sampled_.tokens.begin(), sampled_.tokens.begin() + ptrdiff_t(tokens.size()));
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  table_.n_tokens = int32_t(history_.size());
}

void Session::reserve_kv(int32_t total) {
  const int32_t bs = model_.kv_shape().block_size;
  FERRY_CHECK(table_.reserve(pool_, total, bs), "KV cache full: {} tokens need {} blocks, {} free", total,
              blocks_for_tokens(total, bs) - int32_t(table_.blocks.size()), pool_.n_free());
}

void Session::fill_batch(std::span<const int32_t> tokens, int32_t pos0, bool all_logits, bool last_logits) {
  const int32_t bs = model_.kv_shape().block_size;
  const int32_t n = int32_t(tokens.size());
  Batch& b = batch_;
  b.tokens.assign(tokens.begin(), tokens.end());
  b.positions.resize(size_t(n));
  b.slots.resize(size_t(n));
  for (int32_t i = 0; i < n; ++i) {
    b.positions[size_t(i)] = pos0 + i;
    b.slots[size_t(i)] = table_.slot(pos0 + i, bs);
  }
  b.q_start = {0};
  b.q_len = {n};
  b.kv_len = {pos0 + n};
  b.max_blocks_per_seq = int32_t(table_.blocks.size());
  b.block_tables = table_.blocks;
  b.logit_rows.clear();
  if (all_logits) {
    for (int32_t i = 0; i < n; ++i) b.logit_rows.push_back(i);
  } else if (last_logits) {
    b.logit_rows.push_back(n - 1);
  }
}

void Session::launch_decode(int32_t token, const SamplingParams& params) {
  const ModelConfig& c = model_.config();
  FERRY_CHECK(model_.token_feedback(), "launch_decode needs the model's token feedback on");
  FERRY_CHECK(token >= 0 ? token < c.vocab_size : token == kDrawnByPrevious && !inflight_.empty(),
              "launch_decode: token {} is neither a vocabulary id (of {}) nor the draw of a step in flight", token,
              c.vocab_size);
  const int32_t pos0 = int32_t(history_.size());
  FERRY_CHECK(pos0 + 1 <= max_context_, "no room for another token: the context of {} tokens is full", max_context_);
  reserve_kv(pos0 + 1);
  const int32_t one[1] = {token};
  fill_batch(one, pos0, false, true);
  device_row_ = RowSampling{.mode = RowMode::Device, .params = params, .position = uint64_t(pos0 + 1)};
  model_.launch_sampled(batch_, std::span(&device_row_, 1));
  history_.push_back(token);  // kDrawnByPrevious until collect_decode learns it
  table_.n_tokens = int32_t(history_.size());
  inflight_.push_back(int32_t(history_.size()));  // where the token this step draws goes, once a step consumes it
}

int32_t Session::collect_decode() {
  FERRY_CHECK(!inflight_.empty(), "collect_decode: no decode step in flight");
  model_.collect_sampled(sampled_);
  const int32_t drawn = sampled_.tokens[0];
  const size_t at = size_t(inflight_.front());
  inflight_.pop_front();
  // The step launched after it may have consumed this draw as its input already.
  if (at < history_.size() && history_[at] == kDrawnByPrevious) history_[at] = drawn;
  return drawn;
}

void Session::drop_decode() {
  if (inflight_.empty()) return;
  const int32_t keep = inflight_.front() - 1;  // the history before the oldest step in flight appended its input
  while (!inflight_.empty()) collect_decode();
  truncate(keep);
}

int32_t Session::run(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits,
                     const SamplingParams* device) {
  FERRY_ASSERT(device == nullptr || !all_logits);
  FERRY_CHECK(!tokens.empty(), "nothing to run: no tokens");
  FERRY_CHECK(inflight_.empty(), "{} decode steps are in flight: collect or drop them first", inflight_.size());
  const ModelConfig& c = model_.config();
  const int64_t total = int64_t(history_.size()) + int64_t(tokens.size());
  FERRY_CHECK(total <= max_context_, "{} tokens do not fit the context of {} tokens ({} already in it)", tokens.size(),
              max_context_, history_.size());
  for (int32_t t : tokens)
    FERRY_CHECK(t >= 0 && t < c.vocab_size, "token id {} out of range (vocabulary of {})", t, c.vocab_size);
  reserve_kv(int32_t(total));

  const size_t V = size_t(c.vocab_size);
  if (all_logits) logits.resize(tokens.size() * V);
  const int32_t chunk = model_.max_step_tokens();
  for (size_t start = 0; start < tokens.size(); start += size_t(chunk)) {
    const int32_t n = int32_t(std::min(tokens.size() - start, size_t(chunk)));
    const int32_t pos0 = int32_t(history_.size());
    const bool last_chunk = start + size_t(n) == tokens.size();
    fill_batch(tokens.subspan(start, size_t(n)), pos0, all_logits, last_chunk);
    const Batch& b = batch_;
    int32_t drawn = -1;
    if (device != nullptr && last_chunk) {
      device_row_ = RowSampling{.mode = RowMode::Device, .params = *device, .position = uint64_t(pos0 + n)};
      model_.forward_sampled(b, std::span(&device_row_, 1), sampled_);
      drawn = sampled_.tokens[0];
    } else {
      model_.forward(b, step_logits_);
    }
    history_.insert(history_.end(), b.tokens.begin(), b.tokens.end());
    table_.n_tokens = int32_t(history_.size());
    if (all_logits) {
      std::copy(step_logits_.begin(), step_logits_.end(), logits.begin() + ptrdiff_t(start * V));
    } else if (last_chunk && device != nullptr) {
      return drawn;
    } else if (last_chunk) {
      logits.assign(step_logits_.begin(), step_logits_.end());
    }
  }
  return -1;
}

}  // namespace ferry
