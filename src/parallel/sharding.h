// The tensor-parallel sharding plan (Megatron-style, as gpt-fast's tp.py): which slice of each weight a
// rank holds, and the per-rank ModelConfig the plain model runs with.
//
//   column-parallel (rows split): wq, wk, wv (+ biases) by heads; w_gate, w_up by hidden units
//   row-parallel (columns split): wo by heads, w_down by hidden units -> partial sums, all_reduce_sum after
//   vocab-parallel (rows split):  tok_embd and the lm head: rank r holds vocab rows [r*Vp, r*Vp + Vp),
//                                 Vp = ceil(V / N), padded with zero rows, plus one zero row (index Vp) that
//                                 the ids of other ranks' rows are mapped to; embedding -> all_reduce_sum,
//                                 logits -> all_gather_inplace (zero rows are dropped on reassembly)
//   replicated: norms, q/k norms, rope_freqs, the MoE router (every rank routes every token identically)
//
// Mixture-of-experts layers, two layouts (only one of --tp, --ep above 1; ParallelLayout):
//   --tp N: every expert split like the dense FFN: gate and up column-parallel (rows of each expert's (H, dim), H / N
//           each: the stacked GGUF (E, H, dim) ffn_{gate,up}_exps per expert, or the Hugging Face per-expert tensor),
//           down row-parallel (columns of each (dim, H)); the FFN output summed over the ranks.
//   --ep N: experts placed on ranks, contiguous: rank r holds experts [r*E/N, (r+1)*E/N) whole (local config's
//           expert_begin, n_local_experts); each rank computes its experts' part of every token (slots routed to
//           other ranks' experts add zero) and the ranks' parts are summed (the FFN's all-reduce is the exchange).
//           Everything else (attention, dense FFNs, embedding, lm head) is replicated: those sums and the logits
//           gather run over a group of one (ParallelContext::dense_replicated).
//
// World 1 is the identity plan (the full tensors, no extra row), so one code path serves every N.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/llama_model.h"
#include "model/vocab_shard.h"
#include "model/weights.h"

namespace ferry {

// Rows/Cols of a stacked 3-D expert tensor (E, rows, cols) split each expert's matrix the same way; Experts takes the
// experts [begin, begin + count) whole.
enum class ShardKind { Replicated, Rows, Cols, Vocab, Experts };

// How the ranks divide the model: tp ranks split every weight, or ep ranks place the experts (the rest replicated).
// world() = tp * ep ranks; at most one of them is above 1.
struct ParallelLayout {
  int tp = 1;
  int ep = 1;
  int world() const { return tp * ep; }
};

struct ShardPlan {
  int rank = 0, world = 1;
  ParallelLayout layout;
  ModelConfig full;    // the model as stored
  // What this rank runs. --tp: n_heads/N, n_kv_heads/N, hidden_dim/N, expert_hidden_dim/N, vocab_size = local_rows;
  // --ep: the full model but experts [expert_begin, expert_begin + n_local_experts) of E.
  ModelConfig local;
  VocabShard vocab;

  // How the tensor named `name` (GGUF or Hugging Face naming) is split, and the [begin, begin+count) range of
  // its split dimension this rank holds (ignored for Replicated and Vocab).
  struct Slice {
    ShardKind kind = ShardKind::Replicated;
    int64_t begin = 0, count = 0;
  };
  Slice slice_of(const std::string& name) const;
};

// ferry::Error when the model cannot be split N ways (heads, KV heads, hidden units, an expert's hidden units or the
// experts not divisible; --tp and --ep both above 1; --ep for a model without experts).
ShardPlan make_shard_plan(const ModelConfig& config, int rank, ParallelLayout layout);
// Tensor parallelism over `world` ranks: layout {.tp = world}.
ShardPlan make_shard_plan(const ModelConfig& config, int rank, int world);

// The model's view of the plan (model/llama_model.h): comm (null at world 1), the vocabulary shard, and whether the
// dense part is replicated (expert parallelism).
ParallelContext make_parallel_context(const ShardPlan& plan, Communicator* comm);

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
