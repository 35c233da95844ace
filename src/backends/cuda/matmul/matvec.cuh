// Skinny matmul for a few tokens (decode, short prompt chunks): out (n, n_out) = x (n, n_in) · wᵀ [+ bias].
// Memory-bound on the weight at n = 1: each weight element is read once per call, for all n <= 16 tokens.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/diag/phase_stamps.cuh"
#include "backends/cuda/matmul/weight_layout.cuh"

namespace ferry::cuda_ops {

inline constexpr int kMatvecMaxTokens = 16;  // the backend uses these kernels for n <= this, GEMMs above

// The decode matvec kernels, each on a default path for some type and shape (matmul/plan.h picks one). Retired
// designs (split-K over clusters, f16 math, an L2 bulk prefetch, a 192 KB ring, 16 consumer warps, a row-by-row
// quantized stream, a fused residual add + RMSNorm epilogue) are in docs/perf-log.md.
enum class MatvecKernel {
  // One block per 16 rows over all of K, activations staged in shared memory first; f32 math (matvec.cu). BF16 at
  // one token from 16384 rows where the streamed kernel does not take the shape.
  kRowBlocks,
  // Persistent blocks (one per SM, 16 warps), row groups split evenly over the SMs, K split among warps when rows
  // are few; tensor cores for BF16 at 2..16 tokens; dp4a against two-level int8 activations (a pre-pass into
  // MatvecParams::scratch) for Q8_0/Q4_0/Q4_1/Q4_K (matvec_tiled.cuh). 2..16 tokens, and every type and shape the
  // streamed kernels do not take.
  kTiled,
  // One token on BF16/F16: each block's contiguous rows streamed through a shared-memory ring by cp.async.bulk,
  // filled before the PDL wait; the consumer warps take a whole stage at once where an instance is compiled, else
  // one row after the other (stream_half.cuh).
  kStreamHalf,
  // One token on Q8_0/Q4_0/Q4_K/Q5_K/Q6_K: the same stream (two bulk copies a stage, quants and scales) with a dp4a consumer
  // that quantizes its own activations (stream_quant.cuh).
  kStreamQuant,
};

const char* matvec_kernel_name(MatvecKernel k);  // "rows", "tiled", "stream_half", "stream_quant"

// The largest input width whose RMSNorm a streamed quantized matvec computes in its prologue (MatvecInNorm).
inline constexpr int64_t kInNormMaxCols = 8192;

// The RMSNorm of the layer's residual computed by every block as it loads x (kStreamQuant, where a warp holds one
// column segment: stream_quant_in_norm_applies): x = rms_norm(residual + delta) * weight, with norm.cu's
// add_rms_norm arithmetic and order, so the products equal add_rms_norm + matvec bit for bit. Nothing is written
// back: the residual add is left to a later kernel (MatvecResidualAdd). Saves the norm's launch between two weight
// streams (decode_fusion.cpp).
struct MatvecInNorm {
  const float* residual = nullptr;  // (1, n_in) f32; null: off, x is read as given
  const float* delta = nullptr;     // (1, n_in) f32, added to residual first; null: the residual alone
  const float* weight = nullptr;    // (n_in) f32, the norm's weight
  float eps = 0.0f;
};

// A residual add deferred to a matvec whose output rows match the residual's (kStreamQuant): before
// output row r is stored, residual[r] += delta[r] (add_rms_norm's one rounding). delta may alias out: row r's delta
// is read before row r's output overwrites it, by the same thread.
struct MatvecResidualAdd {
  float* residual = nullptr;     // (1, n_out) f32, updated in place; null: off
  const float* delta = nullptr;  // (1, n_out) f32
  bool add_out = false;          // then the row's output too: residual[r] = (residual[r] + delta[r]) + out[r]
};

// The output rows pushed into the peers' slots of the one-shot all-reduce that follows the projection
// (peer_all_reduce.h, kLamport), each as it is stored: row r's value, canonicalized (+ 0.0f), to slot[q] + set *
// set_stride + r for every peer q, where set = (*counter + 1) & 1 (the call's buffer set: the counter holds the
// last completed call's generation, read after the PDL wait). The all-reduce then only polls (run_add_rms_norm's
// `pushed`), so the values cross NVLink while the projection's last blocks and the kernel boundary run.
// kStreamQuant and kStreamHalf's stage-batched consumer, not in the SwiGLU form.
struct MatvecPeerPush {
  static constexpr int kMaxRanks = 8;
  float* slot[kMaxRanks] = {};        // per rank q: q's slot of this rank (set 0) as mapped here; null: this rank
  int64_t set_stride = 0;             // floats from set 0 to set 1
  const uint32_t* counter = nullptr;  // the all-reduce's call counter; null: off
};

struct MatvecParams {
  WeightView w;        // (n_out, n_in) prepared weight (weight_layout.cuh), dtype given separately
  const float* x;      // (n, n_in) f32, rows contiguous, 16-byte aligned
  const float* bias;   // (n_out) f32 or null
  float* out;          // (n, n_out) f32
  int n_tokens;        // 1 <= n <= kMatvecMaxTokens
  MatvecKernel kernel = MatvecKernel::kTiled;
  void* scratch = nullptr;  // kTiled on quantized weights (its pre-pass): >= matvec_scratch_bytes() device bytes, 16-aligned
  MatvecInNorm in_norm{};    // kStreamQuant only (stream_quant_in_norm_applies): x computed from a norm
  MatvecResidualAdd residual_add{};  // kStreamQuant only, not in the SwiGLU form
  // kStreamQuant: stamps at entry (0), the PDL wait's release (1), the activations quantized (2), the last stage
  // consumed (3), the rows stored (4).
  PhaseStamps stamps{};
  WeightStream stream{};  // kStreamHalf and kStreamQuant: how the producer issues the weight's copies
  // kStreamQuant: the activations quantized to one int8 level per 32 values (x ~=
  // max|x| / 127 q, llama.cpp's q8_1 and the CPU fast path's precision: ~5e-3 relative) instead of two (~2e-5):
  // half the dp4a, a lighter prologue. Ignored elsewhere.
  bool one_level_acts = false;
  MatvecPeerPush peer_push{};  // kStreamQuant, and kStreamHalf's stage-batched consumer: rows pushed to the peers
};

// Device scratch bytes MatvecParams::scratch needs for (weight type, kernel, n tokens, n_in); 0 when none.
size_t matvec_scratch_bytes(DType wtype, MatvecKernel kernel, int n_tokens, int64_t n_in);

// Whether `kernel` takes this weight type, token count and shape on the current device (kStreamHalf: either of its
// consumers).
bool matvec_kernel_applies(MatvecKernel kernel, DType wtype, int n_tokens, int64_t rows, int64_t cols);

// One launch on `stream` (no host synchronisation, no allocation: capturable in a CUDA graph) of p.kernel, which
// must apply (matvec_kernel_applies). Requires a native weight type (weight_layout.cuh). Numerics: fp32 activations
// and fp32 accumulation; in kRowBlocks the quantized weight values enter the products exactly (Q8_0: q/32768;
// Q4_0/Q4_1: 0.5 + q/256 with the block's activation sum subtracted per block), so it differs from the CPU
// reference (dequantize, fp32 dot) only by fp32 summation order (relative L2 ~1e-6..1e-5); kTiled and kStreamQuant
// quantize the activations (matvec_tiled.cuh, stream_quant.cuh).
void matvec(DType wtype, const MatvecParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
