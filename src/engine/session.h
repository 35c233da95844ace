// One sequence running on a LlamaModel: its token history, its block table in the paged KV cache, and the
// steps that extend it. Prompts longer than a step are prefilled in chunks of model.max_step_tokens().
// A new prompt that shares a prefix with the history reuses the cached K/V of that prefix (multi-turn chat
// re-sends the whole conversation; only the new turn is computed).
#pragma once

#include <cstdint>
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
  // Appends tokens and returns the logits of every one of them: (tokens.size(), vocab_size), row-major.
  void append_all_logits(std::span<const int32_t> tokens, std::vector<float>& logits);

  void reset();  // forget the history and give the blocks back
  const std::vector<int32_t>& history() const { return history_; }
  int32_t n_tokens() const { return int32_t(history_.size()); }
  int32_t max_context() const { return max_context_; }

 private:
  // Runs tokens through the model in chunks; all_logits: every row's logits, else only the last row's.
  void run(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits);
  void truncate(int32_t n_keep);

  LlamaModel& model_;
  BlockPool& pool_;
  int32_t max_context_;
  BlockTable table_;
  std::vector<int32_t> history_;
  std::vector<float> last_logits_;  // (vocab_size)
  std::vector<float> step_logits_;
  Batch batch_;
};

}  // namespace ferry
