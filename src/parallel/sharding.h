// The tensor-parallel sharding plan (Megatron-style, as gpt-fast's tp.py): which slice of each weight a
// rank holds, and the per-rank ModelConfig the plain model runs with.
//
//   column-parallel (rows split): wq, wk, wv (+ biases) by heads; w_gate, w_up by hidden units
//   row-parallel (columns split): wo by heads, w_down by hidden units -> partial sums, all_reduce_sum after
//   vocab-parallel (rows split):  tok_embd and the lm head: rank r holds vocab rows [r*Vp, r*Vp + Vp),
//                                 Vp = ceil(V / N), padded with zero rows, plus one zero row (index Vp) that
//                                 the ids of other ranks' rows are mapped to; embedding -> all_reduce_sum,
//                                 logits -> all_gather_inplace (zero rows are dropped on reassembly)
//   replicated: norms, q/k norms, rope_freqs
//
// World 1 is the identity plan (the full tensors, no extra row), so one code path serves every N.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/vocab_shard.h"
#include "model/weights.h"

namespace ferry {

enum class ShardKind { Replicated, Rows, Cols, Vocab };

struct ShardPlan {
  int rank = 0, world = 1;
  ModelConfig full;    // the model as stored
  ModelConfig local;   // what this rank runs: n_heads/N, n_kv_heads/N, hidden_dim/N, vocab_size = local_rows
  VocabShard vocab;

  // How the tensor named `name` (GGUF or Hugging Face naming) is split, and the [begin, begin+count) range of
  // its split dimension this rank holds (ignored for Replicated and Vocab).
  struct Slice {
    ShardKind kind = ShardKind::Replicated;
    int64_t begin = 0, count = 0;
  };
  Slice slice_of(const std::string& name) const;
};

// ferry::Error when the model cannot be split N ways (heads, KV heads or hidden units not divisible).
ShardPlan make_shard_plan(const ModelConfig& config, int rank, int world);

// A WeightSource that hands out this rank's slices of another source's tensors. Row slices are views into
// the base (zero copy); column and vocab slices are host copies owned here until adopt_copies().
class ShardedWeightSource final : public WeightSource {
 public:
  ShardedWeightSource(const WeightSource& base, const ShardPlan& plan) : base_(base), plan_(plan) {}
  const Tensor* find(const std::string& name) const override;
  std::string describe() const override { return base_.describe(); }
  // After load_weights: moves the copies that `weights` still points into (a backend that uses host memory in
  // place, like the CPU backend) into weights.storage; frees the rest.
  void adopt_copies(ModelWeights& weights);

 private:
  struct Entry {
    Tensor view;
    std::shared_ptr<uint8_t[]> bytes;  // the copy `view` points into, or null for a view of the base
    size_t n_bytes = 0;
  };
  const WeightSource& base_;
  ShardPlan plan_;
  mutable std::map<std::string, Entry> entries_;
};

// Loads this rank's weights: load_weights over a ShardedWeightSource with plan.local (world 1: the plain load).
ModelWeights load_sharded_weights(const ShardPlan& plan, const WeightSource& source, bool gguf_names, Backend& backend);

}  // namespace ferry
