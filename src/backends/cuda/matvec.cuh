// Skinny matmul for a few tokens (decode, short prompt chunks): out (n, n_out) = x (n, n_in) · wᵀ [+ bias].
// Memory-bound on the weight at n = 1: each weight element is read once per call, for all n <= 16 tokens.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/phase_stamps.cuh"
#include "backends/cuda/weight_layout.cuh"

namespace ferry::cuda_ops {

inline constexpr int kMatvecMaxTokens = 16; // the backend uses this kernel for n <= this, cuBLASLt above
// Kernel generations (both kept so one benchmark run compares them; the backend uses the default). Versions 3
// (split-K over clusters: 0.73-0.88x of v2) and 4 (f16 math: 1.0-1.2x of v2) were measured and removed; their
// designs and figures are in docs/perf-log.md ("CUDA decode").
//  2: activations staged with plain loads before any weight load, one block per 16 rows over all of K; f32 math.
//  5: persistent blocks, row groups split evenly over the SMs, K split among warps when rows are few, no
//     staging; tensor cores for BF16 at 2..16 tokens; dp4a against two-level int8 activations (a pre-pass into
//     MatvecParams::scratch) for Q8_0/Q4_0/Q4_1/Q4_K (matvec_v5.cuh). Measured on the H200: 1.06-6.3x v2.
//  7: "streamed" (matvec_stream.cuh): one token; BF16/F16/Q8_0 with columns a multiple of 256, Q4_0 of 512, up
//     to 16384; each block's contiguous rows streamed through a shared-memory ring by cp.async.bulk, filled
//     before the PDL wait; version 5 wherever it does not apply.
//  9: version 7 with a stage-batched consumer (matvec_stream.cu) where it applies (BF16/F16 at one token; columns
//     as matvec_stream.cuh says), else version 7, else 5. Measured on the H200: 97-105% of 4.30 TB/s from 14336
//     rows or columns, 85% at 6144x4096, 79% at 4096x4096 (the rule's default for BF16/F16 at one token).
//  10: Q8_0/Q4_0 (and Q4_K: GGUF super-blocks streamed as stored) at one token (matvec_v10.cuh): version 9's stream and stage-batched consumer with dp4a against
//     int8 activations each lane quantizes itself (version 5's two levels, or one with one_level_acts; no pre-pass
//     launch); columns a multiple
//     of 512 up to 16384; version 5 wherever it does not apply. Measured 1.1-1.5x v5 on every shape (H200); the
//     rule runs it for Q4_0 at one token (matmul_dispatch.h).
// Versions 6 (v5 with an L2 bulk prefetch of each warp's next item), 8 (v7 with a 192 KB ring) and 11 (v10 with 16
// consumer warps in two groups: 0.94-1.03x of v10) were measured and removed: no better than v5 / v7 / v10
// (docs/perf-log.md, sessions 3, 4 and "## qv11").
inline constexpr int kMatvecDefaultVersion = 5;

// The residual add + RMSNorm fused into a streamed matvec's epilogue (versions 9 and 10 at one token;
// CudaBackend::matmul_add_rms_norm): with residual set, out = x . w^T is written as usual, then residual += out
// row by row, and the block that finishes last (an arrival counter) normalizes the whole residual:
// norm_out = residual / rms(residual) * weight, with norm.cu's add_rms_norm arithmetic in its order (the same
// bits as matvec + add_rms_norm). Saves the add_rms_norm launch after the wo and down projections of a decode step.
struct MatvecAddNorm {
  float* residual = nullptr;          // (1, rows) f32, updated in place; null: no epilogue
  const float* weight = nullptr;      // (rows) f32, the norm's weight
  float* out = nullptr;               // (1, rows) f32 normed, or null when out_bf16 is set
  uint16_t* out_bf16 = nullptr;       // (1, rows) bf16 normed (rounded to nearest even), or null
  float eps = 0.0f;
  unsigned int* counter = nullptr;    // device word, 0 between calls (the last block resets it); one per stream
};

// The RMSNorm of the layer's residual computed by every block as it loads x (version 10 at one token, where a warp
// holds one column segment: matvec_v10_in_norm_applies): x = rms_norm(residual + delta) * weight, with norm.cu's
// add_rms_norm arithmetic and order, so the products equal add_rms_norm + matvec bit for bit. Nothing is written
// back: the residual add is left to a later kernel (MatvecResidualAdd). Saves the norm's launch between two weight
// streams (CudaBackend::attn_out_ffn; H200 tg128 in-call: +2% Q8_0, within the noise on Q4_0).
struct MatvecInNorm {
  const float* residual = nullptr;  // (1, n_in) f32; null: off, x is read as given
  const float* delta = nullptr;     // (1, n_in) f32, added to residual first; null: the residual alone
  const float* weight = nullptr;    // (n_in) f32, the norm's weight
  float eps = 0.0f;
};

// A residual add deferred to a matvec whose output rows match the residual's (version 10 at one token): before
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
// `pushed`), so the values cross NVLink while the projection's last blocks and the kernel boundary run. Versions 9
// and 10 at one token, not with SwiGLU.
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
  int version = kMatvecDefaultVersion;  // 2, 5, 7, 9, 10 or 11 (see above)
  void* scratch = nullptr;  // versions 5/7/9 on quantized weights (v5's pre-pass): >= matvec_scratch_bytes() device bytes, 16-aligned
  MatvecAddNorm add_norm{};  // versions 9 and 10 only (matvec_add_norm_applies): the fused residual add + RMSNorm
  MatvecInNorm in_norm{};    // version 10 at one token only (matvec_v10_in_norm_applies): x computed from a norm
  MatvecResidualAdd residual_add{};  // version 10 at one token only, not with add_norm or SwiGLU
  // Version 10: stamps at entry (0), the PDL wait's release (1), the activations quantized (2), the last stage
  // consumed (3), the rows stored (4).
  PhaseStamps stamps{};
  WeightStream stream{};  // versions 9 and 10 (streamed): how the producer issues the weight's copies
  // Version 10 on Q8_0/Q4_0: the activations quantized to one int8 level per 32 values (x ~=
  // max|x| / 127 q, llama.cpp's q8_1 and the CPU fast path's precision: ~5e-3 relative) instead of two (~2e-5):
  // half the dp4a, a lighter prologue. Ignored elsewhere.
  bool one_level_acts = false;
  MatvecPeerPush peer_push{};  // versions 9 and 10 at one token: the output rows also pushed to the peers
};

// Device scratch bytes MatvecParams::scratch needs for (weight type, version, n tokens, n_in); 0 when none.
size_t matvec_scratch_bytes(DType wtype, int version, int n_tokens, int64_t n_in);

// One launch on `stream` (no host synchronisation, no allocation: capturable in a CUDA graph). Requires a
// native weight type (weight_layout.cuh). Numerics: fp32 activations and fp32 accumulation; the quantized
// weight values enter the products exactly (Q8_0: q/32768 exactly; Q4_0/Q4_1: 0.5 + q/256 exactly with the
// block's activation sum subtracted per block), so the result differs from the CPU reference (dequantize,
// fp32 dot) only by fp32 summation order (relative L2 ~1e-6..1e-5). Version 4 on Q8_0/Q4_0/Q4_1 rounds the
// (scaled) activations to f16 and sums up to 16 products per f16 partial: relative L2 ~2e-4..5e-4 expected
// (tests: <= 1e-3); the quantized weight values still enter exactly.
void matvec(DType wtype, const MatvecParams& p, cudaStream_t stream);

// Whether version 7 (batched: 9) runs this weight type, token count and shape on the current device.
bool matvec_stream_applies(DType wtype, int n_tokens, int64_t rows, int64_t cols, bool batched = false);

// Whether matvec() with this version runs a kernel that takes MatvecParams::add_norm (version 9's stage-batched
// stream on BF16/F16, version 10 on Q8_0/Q4_0/Q4_K) for this shape, with rows (the normed width) a multiple of 4
// up to kAddNormMaxRows.
inline constexpr int64_t kAddNormMaxRows = 8192;
bool matvec_add_norm_applies(DType wtype, int version, int n_tokens, int64_t rows, int64_t cols);

}  // namespace ferry::cuda_ops
