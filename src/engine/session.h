// One sequence running on a LlamaModel: its token history, its block table in the paged KV cache, and the
// steps that extend it. Prompts longer than a step are prefilled in chunks of model.max_step_tokens().
// A new prompt that shares a prefix with the history reuses the cached K/V of that prefix (multi-turn chat
// re-sends the whole conversation; only the new turn is computed).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "model/llama_model.h"

namespace ferry {

class Session {
 public:
  // max_context: the most tokens this sequence may hold (prompt + generated).
  Session(LlamaModel& model, BlockPool& pool, int32_t max_context);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Makes the history equal to `tokens`, computing only what is not cached yet (the longest common prefix
  // with the current history is kept, at least one token is recomputed to produce logits). Returns the
  // logits of the last token: (vocab_size).
  std::span<const float> set_history(std::span<const int32_t> tokens);
  // Appends tokens and returns the logits of the last one: (vocab_size).
  std::span<const float> append(std::span<const int32_t> tokens);
  // Device sampling (model.supports_device_sampling(); params without penalties): like set_history / append,
  // but the next token is drawn on the device from the last token's logits (the token sampling/sampler.cpp would
  // draw for params at this history length); only the id crosses to the host. -1: every logit was NaN/-inf.
  int32_t set_history_sampled(std::span<const int32_t> tokens, const SamplingParams& params);
  int32_t append_sampled(std::span<const int32_t> tokens, const SamplingParams& params);
  // Appends tokens and returns the logits of every one of them: (tokens.size(), vocab_size), row-major.
  void append_all_logits(std::span<const int32_t> tokens, std::vector<float>& logits);
  // A verify step (engine/spec_verify.h): appends tokens (the last accepted token and the proposals, at most one
  // step) in one step laid out as one-row entries (model/batch.h: each row reads the keys a plain decode at its
  // position reads; on a backend with step graphs the step is captured as a decode-shaped graph). verify fills
  // logits (tokens.size(), vocab_size); verify_sampled (device sampling, params without penalties) draws each
  // row on the device instead, row i with the Philox counter of the history before it (the draw append_sampled
  // would make there) and fills ids (tokens.size()), -1 where every logit was NaN/-inf.
  void verify(std::span<const int32_t> tokens, std::vector<float>& logits);
  void verify_sampled(std::span<const int32_t> tokens, const SamplingParams& params, std::vector<int32_t>& ids);

  // Pipelined decoding (model.token_feedback() on, device sampling): launch_decode appends one token and enqueues
  // its step without waiting; the step draws the next token on the device (as append_sampled would). token: a
  // vocabulary id, or kDrawnByPrevious: the token the step launched just before draws, which the device puts in
  // place before this step's embedding, so the host launches step t + 1 before it knows step t's token (at most
  // LlamaModel::kMaxInFlight steps in flight). collect_decode waits for the oldest step in flight and returns its
  // token (and writes it into the history where the next step took it as kDrawnByPrevious). drop_decode collects
  // every step in flight and forgets the tokens they appended (a stop decided on the host after the next step was
  // launched); their K/V rows stay written and are overwritten later. The other calls need no step in flight.
  static constexpr int32_t kDrawnByPrevious = -1;  // LlamaModel's placeholder of the previous step's logit row 0
  void launch_decode(int32_t token, const SamplingParams& params);
  int32_t collect_decode();
  void drop_decode();
  int decode_steps_in_flight() const { return int(inflight_.size()); }

  void reset();  // forget the history and give the blocks back
  // Keeps the first n_keep tokens of the history (<= n_tokens()): the K/V of the rest is forgotten without a copy,
  // and blocks holding only dropped tokens go back to the pool (a verify step's rejected proposals).
  void truncate(int32_t n_keep);
  const std::vector<int32_t>& history() const { return history_; }
  int32_t n_tokens() const { return int32_t(history_.size()); }
  int32_t max_context() const { return max_context_; }

 private:
  // Runs tokens through the model in chunks; all_logits: every row's logits, else only the last row's.
  // device: draw the last row on the device with these params (logits untouched; returns the id), else -1.
  int32_t run(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits,
              const SamplingParams* device = nullptr);
  // Blocks for `total` tokens in the table (throws "KV cache full" when the pool has too few).
  void reserve_kv(int32_t total);
  // batch_ = one step of `tokens` at positions pos0, pos0 + 1, ...: logits of every row (all_logits), of the last
  // one (last_logits) or of none.
  void fill_batch(std::span<const int32_t> tokens, int32_t pos0, bool all_logits, bool last_logits);
  size_t common_prefix_to_keep(std::span<const int32_t> tokens) const;
  // verify / verify_sampled: checks tokens, reserves their K/V and fills batch_ with their one-row entries.
  void fill_verify_batch(std::span<const int32_t> tokens);

  LlamaModel& model_;
  BlockPool& pool_;
  int32_t max_context_;
  BlockTable table_;
  std::vector<int32_t> history_;
  std::vector<float> last_logits_;  // (vocab_size)
  std::vector<float> step_logits_;
  Batch batch_;
  RowSampling device_row_;  // run with device sampling: the one logit row's settings
  std::vector<RowSampling> verify_rows_;  // verify_sampled: (tokens) every row's settings
  SampledStep sampled_;     // its result
  // Decode steps in flight (launch_decode), oldest first: the history index each one's drawn token takes.
  std::deque<int32_t> inflight_;
};

}  // namespace ferry
