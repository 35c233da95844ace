// Vectorized float kernels for the CPU backend's Fast path outside the matmul: paged attention tiles,
// SwiGLU, RMSNorm, and the exp they use. One generic source (vec_kernels_impl.h) compiled per SIMD level
// (vec_kernels_{scalar,avx2,avx512}.cpp, each with its own target attribute); select_vec_kernels picks the
// table for a level at run time, like select_dot_kernels. The Reference path never uses these.
#pragma once

#include <cstdint>

#include "backends/cpu/simd.h"

namespace ferry {

// Limits of one attention tile: rows = queries x heads of one GQA group, head_dim a multiple of 16.
constexpr int kAttentionMaxHeadDim = 256;
constexpr int kAttentionMaxRows = 32;

// One attention task: n_q consecutive queries of one sequence x n_heads heads sharing one KV head.
// Row r = (query r / n_heads, head r % n_heads) reads q at q + (r / n_heads) * q_stride + (r % n_heads) *
// head_dim and writes out at the same offsets (out_stride). Query qi attends to positions 0..first_last + qi.
struct AttentionTile {
  const float* q = nullptr;    // first row's query: head_dim floats
  int64_t q_stride = 0;        // floats from one query's heads to the next query's
  float* out = nullptr;        // first row's output: head_dim floats
  int64_t out_stride = 0;
  int n_q = 0, n_heads = 0;    // n_q * n_heads <= max_rows of the table used
  int64_t head_dim = 0;        // multiple of 16, <= kAttentionMaxHeadDim
  int64_t first_last = 0;      // last position query 0 attends to (< 2^24)
  const int32_t* block_table = nullptr;  // the sequence's blocks: position p lives in block table[p / block_size]
  int64_t block_size = 0;
  const float* k = nullptr;    // k_cache + kv_head * head_dim: slot t's key at k + t * kv_row
  const float* v = nullptr;    // same for v_cache
  int64_t kv_row = 0;          // floats per cached token (n_kv_heads * head_dim)
  float scale = 1.0f;
  int64_t window = 0;   // > 0: row r attends to positions last(r) - window + 1 .. last(r) only (sliding window)
  float softcap = 0;    // > 0: scores s -> softcap * tanh(s / softcap) before the softmax
};

struct VecKernels {
  SimdLevel level = SimdLevel::Scalar;
  int attention_max_rows = 16;  // rows per tile this level fills best (<= kAttentionMaxRows)
  void (*attention)(const AttentionTile& t) = nullptr;
  // y[i] = exp(x[i]); max relative error ~1e-7 for x in [-87.3, 88.7], 0 below, inf above. y may be x.
  void (*exp)(const float* x, float* y, int64_t n) = nullptr;
  // out[i] = silu(gate[i]) * up[i]; out may alias gate or up.
  void (*swiglu)(float* out, const float* gate, const float* up, int64_t n) = nullptr;
  // out = x / rms(x) * w, over one row of n values (float accumulation).
  void (*rms_norm)(float* out, const float* x, const float* w, int64_t n, float eps) = nullptr;
  // residual += delta, then out = rms_norm(residual) * w.
  void (*add_rms_norm)(float* out, float* residual, const float* delta, const float* w, int64_t n,
                       float eps) = nullptr;
};

// Throws ferry::Error when this CPU lacks the level.
VecKernels select_vec_kernels(SimdLevel level);

}  // namespace ferry
