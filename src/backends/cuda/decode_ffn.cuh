// A decode layer's tail at one token as one persistent kernel (Backend::attn_out_ffn's CUDA form):
//   residual += attn . wo^T;                 x = rms_norm(residual) * ffn_norm
//   act = silu(x . w_gate^T) * (x . w_up^T); residual += act . w_down^T
//   out = rms_norm(residual) * next_norm    (the next layer's attention input)
//
// Why (the hypothesis it was built on): at one token each of these was its own launch (wo, add_rms_norm, gate|up +
// SwiGLU, down, add_rms_norm), and a streamed matvec keeps one block per SM (its ring fills half the SM's shared
// memory), so the next kernel's producers can only start when this one's blocks leave: ~2-3 us of HBM time a
// boundary (H200, Llama-3-8B shape, Q4_0: the ops alone 59.8 us a layer, their weight bytes 25.2 us at 4.30 TB/s).
// Here one block per SM runs the three projections in order over ONE ring:
//  - the producer warp streams wo's rows, then w_gate|w_up's row pairs, then w_down's rows of its block, never
//    waiting for activations, so it fills the next weight's first stages while the consumers finish the current
//    one and wait at the barrier (a 200 KB ring: decode_ffn_plan.cuh);
//  - the consumer warps run version 10's stage loop (matvec_v10_consume.cuh) for each weight, separated by
//    grid-wide barriers (an arrival counter in global memory; the grid is one block per SM, all resident);
//  - the norms need no launch: after the barrier every block computes the sum of squares of the whole residual
//    (16 KB from L2, norm.cu's order, so the same bits) and its lanes normalize the columns they quantize.
// Numerics: every step is version 10's (same stage rows, same reduction trees, same row-to-block assignment) and
// norm.cu's, so the outputs equal matmul + add_rms_norm + matmul_swiglu + matmul + add_rms_norm bit for bit
// (tests/cuda/decode_ffn_test.cpp).
// Shapes: one compiled instance per (weight type, dim, hidden) in decode_ffn_plan.cuh's list; q_dim == dim.
//
// Measured (H200, docs/perf-log.md "## Session 11"): SLOWER than the single ops, so CudaBackendOptions::decode_ffn
// is off by default. tg128 Q4_0 409.6 vs 459.6 tok/s, Q8_0 345.7 vs 364.5 (in-call A/B); the kernel takes ~45 us a
// layer (ncu), the sum of the three matvecs alone. Its warps spend ~25% of their samples at the three grid
// barriers (2-6 us each): a barrier waits for the block whose last stage lands latest, and while the consumers
// wait no ring slot frees, so the producer stops too: the ring buffers only what the consumers have not yet
// freed, and at one token the consumers are about as fast as HBM. Handing stages to blocks dynamically (a counter
// per weight) evened the stage counts but not the landing times (0.98x / 0.93x more). A kernel boundary under PDL
// costs no more than such a barrier. What would make the fusion pay: consumers well ahead of HBM (the ring then
// has free slots at a barrier), or a cheaper barrier than the grid's slowest block.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/weight_layout.cuh"
#include "core/dtype.h"

namespace ferry::cuda_ops {

struct DecodeFfnParams {
  const float* attn;            // (1, q_dim) f32: the o-projection's input (attention output)
  WeightView wo;                // (dim, q_dim), Q8_0/Q4_0 split layout (weight_layout.cuh)
  float* residual;              // (1, dim) f32, updated in place (twice)
  const float* ffn_norm;        // (dim) f32
  WeightView w_gate_up;         // (2 hidden, dim): w_gate's rows then w_up's
  float* act;                   // (1, hidden) f32 scratch: silu(gate) * up, the down projection's input
  WeightView w_down;            // (dim, hidden)
  const float* next_norm;       // (dim) f32
  float* out;                   // (1, dim) f32 = rms_norm(residual) * next_norm
  float eps;
  unsigned long long* barrier;  // device u64, zeroed once and never reset: each barrier adds the grid to it
  // How the producer issues each weight's copies (MatvecParams::stream). Session 11's grid barriers waited on the
  // block whose stages landed last, with ~15-26 MB of copies queued at once: ring_inflight caps that.
  WeightStream stream{};
};

// Whether the kernel takes these weights (one type for all three, Q8_0 or Q4_0; a compiled shape; the shared
// memory within max_smem; at least n_sms rows and units, so its rows fall on blocks as version 10's do).
bool decode_ffn_supports(DType wtype, int64_t q_dim, int64_t dim, int64_t hidden, int n_sms, size_t max_smem);
// decode_ffn_supports on the current device.
bool decode_ffn_applies(DType wtype, int64_t q_dim, int64_t dim, int64_t hidden);
// One launch (requires decode_ffn_applies); grid = the device's SM count, PDL.
void decode_ffn(DType wtype, const DecodeFfnParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
