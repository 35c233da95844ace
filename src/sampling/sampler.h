// Turns one row of logits into one token: penalties -> (greedy if temperature == 0) -> temperature -> top-k
// -> softmax -> top-p -> min-p -> renormalize -> draw.
//
// Determinism (so the GPU sampler can match it): weights are exp_nonpositive((logit - max) / T) (no libm);
// the draw for the token at position p (= history.size()) uses u = philox_uniform(seed, p) and walks the
// kept tokens in ascending id order, choosing the first whose cumulative weight exceeds u * (sum of kept
// weights, summed by sum_lanes). The result depends only on (logits, history, params), never on earlier
// calls: re-running a sequence after a preemption gives the same tokens. Independent samples of one prompt
// (n > 1) need different seeds. Summation order can move a top-p boundary only when the cumulative mass
// lies within rounding (~1e-16 relative) of top_p.
//
// Ranking ties (equal logits) go to the lower id everywhere (ranks_before in top_k.h). Cost on a 128k vocab
// (bench: SamplerBench.DISABLED_Vocab128k): ~25-45 us with top-k; ~0.35 ms for temperature-only or
// min-p-only, ~0.6-0.8 ms for top-p without top-k (one exp per token, buckets + weighted quickselect).
//
// Non-finite logits: NaN counts as -inf (never drawn), +inf as the largest float. When every logit is
// NaN/-inf there is nothing to draw, and sample() throws ferry::Error (the engine fails that request only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ferry/sampling.h"
#include "sampling/top_k.h"

namespace ferry {

struct TokenProb {
  int32_t id = 0;
  float prob = 0.0f;
};

// The draw's two halves, exposed so tests can pin them to the definition. weight: (n) f32 >= 0, finite.
// sum_with_blocks returns sum_lanes(weight, n) bit for bit and fills blocks with (ceil(n / kDrawBlock)) sums
// of consecutive kDrawBlock-weight blocks (estimates: any summation order). draw_sequential is the
// definition: the first i whose cumulative weight (summed in double in id order) exceeds target, else the
// last i with weight > 0 (-1 when none). draw_blocked returns the same index faster: it finds the crossing
// from the block sums and walks one block, which is exact whenever target is farther than a rigorous
// rounding bound (~4n * 2^-53 * total) from the crossing, and otherwise (about one draw in 2^30) runs
// draw_sequential. total: sum_with_blocks' result; blocks: its block sums.
inline constexpr size_t kDrawBlock = 512;
double sum_with_blocks(const float* weight, size_t n, std::vector<double>& blocks);
int32_t draw_sequential(const float* weight, size_t n, double target);
int32_t draw_blocked(const float* weight, size_t n, double target, double total, std::span<const double> blocks);

class Sampler {
 public:
  // Validates params (ferry::Error on a bad one); vocab_size > 0.
  Sampler(const SamplingParams& params, int32_t vocab_size);

  // logits: (vocab_size) f32, not modified. history: the sequence so far (prompt + generated), token ids in
  // [0, vocab_size) within the penalty window. Returns the sampled token.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // The same draw without the history, for penalties off (ferry::Error otherwise): position = the history's
  // length (the Philox counter). What a backend's sample() computes per row.
  int32_t sample_at(std::span<const float> logits, uint64_t position);
  // New settings for the next draws (validated); the buffers stay (a backend reuses one Sampler per row).
  void set_params(const SamplingParams& params);

  // Applies repetition, presence and frequency penalties in place to the tokens in the window (a penalized
  // NaN stays NaN). logits: (vocab_size) f32. Public so the formulas can be tested on their own and reused
  // by the GPU path's reference.
  void apply_penalties(std::span<float> logits, std::span<const int32_t> history);

  // The tokens the last sample() could have drawn (probability > 0), ascending id, with their renormalized
  // probabilities (greedy: the argmax with probability 1). Computed on request (O(vocab_size) after a
  // sample without top-k), so sample() itself never builds it.
  std::vector<TokenProb> kept() const;

  const SamplingParams& params() const { return params_; }
  int32_t vocab_size() const { return vocab_size_; }

 private:
  int32_t draw(const float* weight, size_t n, uint64_t position);  // see the header comment

  // Two paths, same result. Sparse (top-k on): the k candidates in cand_. Dense (top-k off): a weight per
  // vocabulary entry in dense_, zero for excluded tokens; cand_ is used only for top-p's selection.
  int32_t sample_greedy(std::span<const float> logits);
  int32_t sample_sparse(std::span<const float> logits, uint64_t position);
  int32_t sample_dense(std::span<const float> logits, uint64_t position);
  void apply_dense_top_p(std::span<const float> logits, double target);

  static constexpr uint32_t kTopPBucketShift = 20;  // a weight's float bits >> 20: exponent + 3 mantissa bits
  static constexpr uint32_t kTopPBuckets = 1024;    // weights are in [0, 1]: bits >> 20 <= 0x3F8

  SamplingParams params_;
  int32_t vocab_size_;
  std::vector<float> work_;        // (vocab_size) penalized logits (used only when penalties are on)
  std::vector<float> dense_;       // (vocab_size) dense path: unnormalized weights, 0 = excluded
  std::vector<int32_t> counts_;    // (vocab_size) occurrences in the penalty window; all zero between calls
  std::vector<int32_t> touched_;   // ids whose counts_ entry is nonzero during apply_penalties
  std::vector<Candidate> cand_;    // candidates of the current call
  std::vector<double> bucket_mass_;  // (kTopPBuckets) dense top-p: weight per bucket
  enum class Path { kNone, kGreedy, kSparse, kDense };
  Path last_path_ = Path::kNone;   // which of greedy_token_ / cand_ / dense_ holds the last call's result
  int32_t greedy_token_ = -1;
  double kept_sum_ = 0.0;          // sum of the kept weights of the last call
  std::vector<double> block_sums_;  // (ceil(n / kDrawBlock)) draw: sums of blocks of kept weights
};

}  // namespace ferry
