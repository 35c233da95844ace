// Sampling on the GPU: one token per row of logits, the same token src/sampling/sampler.cpp picks for the same
// logits and parameters (penalties excluded: they are applied to the logits before, on the CPU for now).
//
// Launches (sample_rows): pass 1 (argmax, candidate count; top-k rows also a coarse histogram of their keys) split
// over blocks (sampling_heuristics.h); the nucleus histogram (rows without top-k that cut by top-p or min-p); the
// gather of each fast row's candidates; then one block of kSampleThreads a row draws. Each row takes one of:
//  - greedy (temperature 0, or every logit NaN / -inf): the argmax (NaN never wins, ties -> lowest id).
//  - the top-k path (0 < top_k <= kSampleTopKMax): the ids in the coarse-histogram bins that hold the top_k
//    largest keys (at most kSampleCandMax), ranked (bitonic sort), cut (top-k, min-p, top-p as rank prefixes)
//    and drawn in id order, as sample_sparse.
//  - the nucleus path (no top-k, top_p < 1 or min_p > 0): weights w = sampler_exp((logit - max) / T) bucketed by
//    their float bits >> 20 as apply_dense_top_p does; a histogram of mass (fixed point) and counts per bucket
//    finds the lowest bucket that must hold the top-p crossing (with a margin); the ids in the buckets from there
//    up that survive min-p (at most kSampleNucleusMax) are gathered in id order; the row's block recomputes the
//    CPU's bucket walk, ranks the crossing bucket (at most kSampleCrossMax ids) and draws (sample_dense).
//  - otherwise the one-block path: radix selects (4 passes of 8-bit digits over an order-preserving key) for
//    top-k and top-p, min-p, and a scan for the draw, ~14 walks of the row (hundreds of us at a 128K vocabulary).
// Sums: the top-k path sums in the CPU's order except the draw's kept mass; the one-block path in another order;
// the nucleus path decides on exact fixed-point estimates with a proven tolerance and, when a decision lies within
// it, recomputes that row serially in the CPU's order (bucket masses, kept mass by sum_lanes' 8 lanes, the draw).
// What is left: the top-p target's total over the whole vocabulary (summed in parallel; the CPU's 8 lanes of 16K
// sequential adds), and a crossing bucket of more than 64 ids (the CPU's quickselect adds in pivot order). The
// picked token can differ from the CPU's only where one such sum lies within rounding (~1e-16 relative) of a cut.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "backends/cuda/common/bits.cuh"
#include "backends/cuda/common/launch.cuh"  // FERRY_HD
#include "backends/cuda/sampling/sampling_heuristics.h"

namespace ferry::cuda_ops {

inline constexpr int kSampleThreads = 1024;  // the draw's block (one a row)

// One row's settings (SamplingParams minus the penalties), position = the draw's Philox counter.
struct SampleRowParams {
  float temperature;  // 0: greedy
  int32_t top_k;      // <= 0 or >= vocab: off
  float top_p;        // 1: off
  float min_p;        // 0: off
  uint64_t seed;
  uint64_t position;
};

struct SampleParams {
  const float* logits;           // (m, vocab) f32, rows contiguous
  int64_t m, vocab;              // vocab < 2^31
  const SampleRowParams* rows;   // (m) device
  int32_t* out;                  // (m) i32: the sampled id, -1 when every logit is NaN / -inf
  // (m, sample_rows_parts_bytes / m) device scratch for the streaming passes split over blocks, or null: one block
  // a row does pass 1 (and no fast path is taken). The result is the same either way.
  void* parts = nullptr;
  // (m, sample_rows_cand_row_bytes(vocab)) device scratch for the top-k and nucleus paths, or null (needs parts).
  // Zeroed once at allocation: every call leaves it zeroed again (its per-tile table is rewritten, not read stale).
  // Rows whose candidates do not fit take the one-block path; the token is the same either way.
  void* cand = nullptr;
  // Tests: every nucleus decision takes the exact serial route, as when an estimate lies within its tolerance.
  bool exact_only = false;
  // Whether some row may take the nucleus path (sample_rows_need): false skips the nucleus histogram's launch,
  // which would find nothing to do (a top-k-only batch). Only with cand.
  bool nucleus = true;
};

inline constexpr int kSampleTopKMax = 1024;      // the largest top_k the top-k path takes
inline constexpr int kSampleCandMax = 4096;      // candidates a top-k row gathers at most
inline constexpr int kSampleBins = 4096;         // top-k's coarse histogram: a key's top 12 bits
inline constexpr int kSampleBuckets = 1024;      // nucleus: a weight's float bits >> 20 (weights in [0, 1]: <= 0x3F8)
inline constexpr int kSampleNucleusMax = 8192;   // candidates a nucleus row gathers at most
inline constexpr int kSampleCrossMax = 4096;     // ids of a nucleus row's crossing bucket at most
static_assert(kSampleNucleusMax >= kSampleCandMax);

// A row's part of SampleParams::cand: the top-k histogram (kSampleBins u32), the nucleus histogram (kSampleBuckets
// u64 mass in units of 2^-32, then kSampleBuckets u32 counts), the gathered count (16 bytes), the per-tile table
// (ceil(vocab / kSampleGatherTile) u32 pairs: offset, count), the candidates (kSampleNucleusMax u64).
FERRY_HD inline size_t sample_cand_tiles(int64_t vocab) { return size_t((vocab + kSampleGatherTile - 1) / kSampleGatherTile); }
FERRY_HD inline size_t sample_rows_cand_row_bytes(int64_t vocab) {
  return size_t(kSampleBins) * 4 + size_t(kSampleBuckets) * 12 + 16 + (sample_cand_tiles(vocab) * 8 + 15) / 16 * 16 +
         size_t(kSampleNucleusMax) * 8;
}
inline size_t sample_rows_cand_bytes(int64_t m, int64_t vocab) { return size_t(m) * sample_rows_cand_row_bytes(vocab); }
// Bytes SampleParams::parts needs for m rows: per row kSamplePartsMax (best i64, count f64, total f64).
inline size_t sample_rows_parts_bytes(int64_t m) { return size_t(m) * kSamplePartsMax * 24; }

// Whether a row takes the top-k path (greedy rows ride along: they only need the argmax).
FERRY_HD inline bool sample_topk_fast(const SampleRowParams& r, int64_t vocab) {
  return r.temperature == 0.0f || (r.top_k > 0 && r.top_k <= kSampleTopKMax && r.top_k < vocab);
}
// Whether a row tries the nucleus path: sample_dense's settings (no top-k) with a cut (top-p or min-p).
FERRY_HD inline bool sample_nucleus(const SampleRowParams& r, int64_t vocab) {
  return r.temperature != 0.0f && !(r.top_k > 0 && r.top_k < vocab) && (r.top_p < 1.0f || r.min_p > 0.0f);
}

// What a batch of rows needs (host, from the rows' settings before they are copied): the fast paths' scratch
// (SampleParams::cand: some row samples with a top-k or a top-p / min-p cut; greedy rows need only pass 1's argmax)
// and the nucleus histogram's launch (SampleParams::nucleus). Without either, sample_rows is pass 1 and the draw.
struct SampleRowsNeed {
  bool cand = false, nucleus = false;
};
inline SampleRowsNeed sample_rows_need(const SampleRowParams* rows, int64_t m, int64_t vocab) {
  SampleRowsNeed n;
  for (int64_t i = 0; i < m; ++i) {
    const bool nucleus = sample_nucleus(rows[i], vocab);
    n.nucleus = n.nucleus || nucleus;
    n.cand = n.cand || nucleus || (rows[i].temperature != 0.0f && sample_topk_fast(rows[i], vocab));
  }
  return n;
}

// Up to four launches on `stream` (pass 1, with SampleParams::cand the nucleus histogram (when
// SampleParams::nucleus) and the gather, the draw; the draw alone without SampleParams::parts); no allocation, no
// host synchronisation: capturable.
void sample_rows(const SampleParams& p, cudaStream_t stream);

// ---- shared with the host tests (bit-exact ports of sampling/sampler_math.h and sampling/philox.h) ----------------
// 1 / temperature for a sampled row (temperature > 0), clamped to the largest finite float: the weights' scale.
FERRY_HD inline float sample_inv_temperature(const SampleRowParams& r) {
  const float inv = 1.0f / r.temperature;
  return inv < 3.402823466e38f ? inv : 3.402823466e38f;
}
FERRY_HD inline uint32_t f2u(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
FERRY_HD inline float u2f(uint32_t u) { return bits_to_float(u); }
// IEEE single operations that the device compiler may not fuse into an FMA (the CPU reference has no FMA): mul_rn
// (common/bits.cuh) and add_rn.
FERRY_HD inline float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// sampling/sampler_math.h exp_nonpositive, operation for operation.
FERRY_HD inline float sampler_exp(float x) {
  const float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float kRound = 12582912.0f;
  const uint32_t keep = 0u - static_cast<uint32_t>(x > -87.0f);
  const float t = add_rn(mul_rn(x, kLog2e), kRound);
  const float n = add_rn(t, -kRound);
  const uint32_t ni = f2u(t) - f2u(kRound);
  float r = add_rn(x, -mul_rn(n, kLn2Hi));
  r = add_rn(r, -mul_rn(n, kLn2Lo));
  const float r2 = mul_rn(r, r);
  float p = 1.9875691500e-4f;
  p = add_rn(mul_rn(p, r), 1.3981999507e-3f);
  p = add_rn(mul_rn(p, r), 8.3334519073e-3f);
  p = add_rn(mul_rn(p, r), 4.1665795894e-2f);
  p = add_rn(mul_rn(p, r), 1.6666665459e-1f);
  p = add_rn(mul_rn(p, r), 5.0000001201e-1f);
  p = add_rn(add_rn(mul_rn(p, r2), r), 1.0f);
  const float scale = u2f((ni + 127u) << 23);
  return u2f(f2u(mul_rn(p, scale)) & keep);
}

// sampling/philox.h philox_uniform(seed, counter).
FERRY_HD inline float sampler_uniform(uint64_t seed, uint64_t counter) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n1 = uint32_t(p1), n2 = uint32_t(p0 >> 32) ^ c3 ^ k1,
                   n3 = uint32_t(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
  }
  return float(c0 >> 8) * (1.0f / 16777216.0f);
}

// Order-preserving key of a logit: larger logit -> larger key; +inf as the largest float; 0 for NaN and -inf
// (never a candidate; every other key is > 0x007FFFFF).
FERRY_HD inline uint32_t logit_key(float l) {
  uint32_t b = f2u(l);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u || b == 0xFF800000u) return 0;  // NaN, -inf
  if (b == 0x7F800000u) b = 0x7F7FFFFFu;                             // +inf -> the largest float
  if (b == 0x80000000u) b = 0;                                       // -0 ranks as +0 (equal logits)
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
// The logit a key stands for (finite_top of the original).
FERRY_HD inline float key_logit(uint32_t k) { return u2f((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k); }


// ---- the nucleus path's decisions (sampling.cu's draw_nucleus, thread 0, and the host replay in the tests) ------
// Weights w = key_weight(key) lie in [0, 1]; a weight's bucket is its float bits >> 20 (apply_dense_top_p's
// bucket_of): 0 holds only w = 0 (weights below 2^-126 are 0), so every candidate's bucket is >= 8.
FERRY_HD inline uint32_t weight_bucket(float w) { return f2u(w) >> 20; }
// The weight of a key (0 for key 0: NaN, -inf, or a candidate marked dropped): sample_dense's weight_of.
FERRY_HD inline float key_weight(uint32_t key, float max_logit, float inv_t) {
  return key == 0 ? 0.0f : sampler_exp(mul_rn(add_rn(key_logit(key), -max_logit), inv_t));
}
// Whether a weight survives min-p (and is a candidate at all).
FERRY_HD inline bool nucleus_survives(float w, float min_p) { return w > 0.0f && !(min_p > 0.0f && w < min_p); }
// Fixed-point weights: exact integer sums in any order (2^-32 units over a whole row, 2^-40 over <= 8192
// candidates: both below 2^63 / 2^53).
FERRY_HD inline uint64_t fixed32(float w) { return uint64_t(double(w) * 4294967296.0); }
FERRY_HD inline uint64_t fixed40(float w) { return uint64_t(double(w) * 1099511627776.0); }

// The gather's cut from the row's histogram (mass32: the survivors' fixed32 mass per bucket, count: survivors per
// bucket): the highest bucket B whose mass from the top, a lower bound of the real mass, reaches top_p * total
// with a 2^-30 relative margin (the CPU's sums and total are within ~1e-11 of the real ones at a 128K vocabulary,
// so the CPU's crossing bucket is >= B); bucket 1 (every survivor) when none does or top-p is off. count = the
// survivors in buckets >= B: the candidates to gather.
struct NucleusGatherCut {
  uint32_t bucket, count;
};
FERRY_HD inline double nucleus_gather_threshold(float top_p, double total) {
  return top_p < 1.0f ? double(top_p) * total * (1.0 + 0x1p-30) : 1e300;
}
FERRY_HD inline bool nucleus_reaches(uint64_t mass32, double threshold) { return double(mass32) * 0x1p-32 >= threshold; }
inline NucleusGatherCut nucleus_gather_cut(const uint64_t* mass32, const uint32_t* count, double total, float top_p) {
  const double thr = nucleus_gather_threshold(top_p, total);
  uint64_t f = 0;
  uint32_t c = 0;
  for (int b = kSampleBuckets - 1; b >= 1; --b) {
    f += mass32[b];
    c += count[b];
    if (nucleus_reaches(f, thr)) return {uint32_t(b), c};
  }
  return {1u, c};
}

// The bucket walk of apply_dense_top_p over the candidates' buckets (those >= lowest, the gather's cut): the
// first bucket from the top where the mass from the top reaches target. kCut: that bucket, before = the mass above
// it; kKeepAll: none does and every survivor was gathered (the CPU keeps everything); kMissed: none does but
// buckets below `lowest` were not gathered (never with the gather's margin: the row takes the one-block path);
// kAmbiguous: an estimate lies within its tolerance of target (decide exactly).
enum class NucleusStep : int32_t { kCut, kKeepAll, kMissed, kAmbiguous };
struct NucleusCross {
  NucleusStep step;
  uint32_t bucket;
  double before;
};
// Estimates: mass40 = fixed40 sums per bucket (exact integers; the real mass is within n * 2^-40 above them).
FERRY_HD inline NucleusCross nucleus_cross_estimate(const uint64_t* mass40, uint32_t lowest, double target, double tol) {
  uint64_t f = 0;
  for (int b = kSampleBuckets - 1; b >= int(lowest); --b) {
    const double before = double(f) * 0x1p-40;
    f += mass40[b];
    const double cum = double(f) * 0x1p-40;
    if (cum >= target + tol) return {NucleusStep::kCut, uint32_t(b), before};
    if (cum > target - tol) return {NucleusStep::kAmbiguous, 0u, 0.0};
  }
  return {lowest <= 1 ? NucleusStep::kKeepAll : NucleusStep::kMissed, 0u, 0.0};
}
// Exact: mass = the CPU's bucket_mass_ (sequential sums in id order), the CPU's comparisons.
FERRY_HD inline NucleusCross nucleus_cross_exact(const double* mass, uint32_t lowest, double target) {
  double before = 0.0;
  for (int b = kSampleBuckets - 1; b >= int(lowest); --b) {
    if (before + mass[b] >= target) return {NucleusStep::kCut, uint32_t(b), before};
    before += mass[b];
  }
  return {lowest <= 1 ? NucleusStep::kKeepAll : NucleusStep::kMissed, 0u, 0.0};
}
// Tolerance of the estimates' decisions (bucket walk and the crossing bucket's walk): the fixed-point truncation
// (n * 2^-40), the CPU's rounding of n candidates' and 1024 buckets' sums, and both totals' rounding (2 * vocab
// terms), all relative to the total mass.
FERRY_HD inline double nucleus_cross_tol(int64_t n, int64_t vocab, double total) {
  return double(n) * 0x1p-40 + (double(n) + 1024.0 + 2.0 * double(vocab) + 64.0) * 0x1p-53 * total;
}

// select_top_p over the crossing bucket's s members in rank order (wr(r): the weight of rank r), target t2 =
// target - before: the smallest prefix whose mass reaches t2, else all s. With tol 0 the CPU's walk (bit for bit
// for s <= 64; above, the CPU's quickselect adds in another order).
struct NucleusKeep {
  int32_t keep;
  bool ambiguous;
};
template <class W>
FERRY_HD NucleusKeep nucleus_keep(W&& wr, int32_t s, double t2, double tol) {
  double cum = 0.0;
  for (int32_t r = 0; r < s; ++r) {
    cum += double(wr(r));
    if (cum >= t2 + tol) return {r + 1, false};
    if (cum > t2 - tol) return {0, true};
  }
  return {s, false};
}

// The draw's tolerance for fixed40 prefix estimates E_i of n kept weights whose mass is about `kept`: with
// E_{i-1} <= target - tol < target + tol < E_i the CPU's draw (draw_sequential after sum_with_blocks) picks i.
FERRY_HD inline double nucleus_draw_tol(int64_t n, double kept) {
  return 2.0 * double(n) * 0x1p-40 + (4.0 * double(n) + 256.0) * 0x1p-53 * (kept + double(n) * 0x1p-40);
}
// sample_dense's draw, bit for bit, over the kept candidates in id order (id(i), w(i); dropped ones weigh 0):
// the kept sum as sum_lanes over the vocabulary (8 lanes by id % 8 below vocab / 8 * 8, then the tail), target =
// u * sum, the first id whose running sum exceeds it, else the last one with weight.
template <class Id, class W>
FERRY_HD int32_t nucleus_draw_exact(Id&& id, W&& w, int32_t n, int64_t vocab, float u) {
  const int64_t n8 = vocab / 8 * 8;
  double lane[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}, total = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    const int64_t d = id(i);
    if (d < n8) {
      lane[d % 8] += double(w(i));
    } else {
      total += double(w(i));
    }
  }
  for (int j = 0; j < 8; ++j) total += lane[j];
  const double target = double(u) * total;
  double cum = 0.0;
  int32_t last = -1;
  for (int32_t i = 0; i < n; ++i) {
    cum += double(w(i));
    if (cum > target) return int32_t(id(i));
    if (w(i) > 0.0f) last = int32_t(id(i));
  }
  return last;
}

}  // namespace ferry::cuda_ops
