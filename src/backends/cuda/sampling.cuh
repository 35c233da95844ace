// Sampling on the GPU: one token per row of logits, the same token src/sampling/sampler.cpp picks for the same
// logits and parameters (penalties excluded: they are applied to the logits before, on the CPU for now).
//
// Per row (one block of kSampleThreads threads; no sort of the vocabulary):
//  1. argmax (NaN never wins, ties -> lowest id); temperature 0 returns it.
//  2. top-k (0 < k < vocab): radix select (4 passes of 8-bit digits) over an order-preserving 32-bit key of the
//     logit (+inf counts as the largest float, NaN / -inf are never candidates) finds the k-th key; ties at it
//     are kept in ascending id order (ranks_before in sampling/top_k.h).
//  3. weights w = exp_nonpositive((logit - max) / T), bit for bit the CPU's (sampler_exp below); total = their
//     sum over the candidates (double); min-p drops w < min_p.
//  4. top-p (< 1): the same radix select, histograms of mass instead of counts, finds the smallest best-ranked
//     prefix whose mass reaches top_p * total (ties at the cut in id order).
//  5. draw: u = philox_uniform(seed, position); the first kept id (ascending) whose cumulative weight exceeds
//     u * (kept mass), else the last kept id with weight > 0.
// Sums run in double in another order than the CPU's; the picked token can differ only when a cumulative sum
// lies within rounding (~1e-16 relative) of a boundary.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/weight_layout.cuh"  // FERRY_HD

namespace ferry::cuda_ops {

inline constexpr int kSampleThreads = 1024;
// Pass 1 (argmax and the candidate count) of each row split over this many blocks when SampleParams::parts is
// set: one block alone walked a 128K-vocabulary row in ~25 us on an H200 (one SM's reads), the whole draw of a
// greedy batch-1 step.
inline constexpr int kSampleParts = 32;

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
  // (m, kSampleParts) device scratch for pass 1 split over blocks (sample_rows_parts_bytes), or null: one block a
  // row does it. The result is the same either way (a max of (key, id) pairs and an exact count).
  void* parts = nullptr;
  // (m, sample_rows_topk_bytes / m) device scratch for the top-k fast path, or null; needs parts. Zeroed once at
  // allocation: every call leaves it zeroed again. Rows with 0 < top_k <= kSampleTopKMax gather their candidates
  // (the ids in the coarse-histogram bins that hold the top_k largest keys, at most kSampleCandMax) with
  // kSampleParts blocks, and the row's block ranks, cuts and draws among them alone; other rows (and a row whose
  // candidates do not fit) take the one-block path. The token is the same either way.
  void* topk = nullptr;
};

inline constexpr int kSampleTopKMax = 1024;   // the largest top_k the fast path takes
inline constexpr int kSampleCandMax = 4096;   // candidates a row gathers at most
inline constexpr int kSampleBins = 4096;      // the coarse histogram: a key's top 12 bits (sign, exponent, 3 bits)
// Bytes SampleParams::topk needs for m rows: per row the histogram (kSampleBins u32), a counter (16 bytes), the
// candidates (kSampleCandMax u64).
FERRY_HD inline size_t sample_rows_topk_row_bytes() { return kSampleBins * 4 + 16 + size_t(kSampleCandMax) * 8; }
inline size_t sample_rows_topk_bytes(int64_t m) { return size_t(m) * sample_rows_topk_row_bytes(); }
// Whether a row's settings take the top-k fast path (greedy rows ride along: they only need the argmax).
FERRY_HD inline bool sample_topk_fast(const SampleRowParams& r, int64_t vocab) {
  return r.temperature == 0.0f || (r.top_k > 0 && r.top_k <= kSampleTopKMax && r.top_k < vocab);
}

// Bytes SampleParams::parts needs for m rows.
inline size_t sample_rows_parts_bytes(int64_t m) { return size_t(m) * kSampleParts * (sizeof(int64_t) + sizeof(double)); }

// One launch on `stream`, m blocks (two with SampleParams::parts: m x kSampleParts blocks first); no allocation,
// no host synchronisation: capturable.
void sample_rows(const SampleParams& p, cudaStream_t stream);

// ---- shared with the host tests (bit-exact ports of sampling/sampler_math.h and sampling/philox.h) ----------------
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
// IEEE single operations that the device compiler may not fuse into an FMA (the CPU reference has no FMA).
FERRY_HD inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
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

}  // namespace ferry::cuda_ops
