// The matmul plan: which kernel runs a matmul of n tokens through a prepared weight, and which epilogues that kernel
// takes for the shape. Every caller in the backend (matmul, matmul_swiglu, the decode-layer fusion, the tensor-
// parallel push) asks plan_matmul and nothing else re-derives eligibility. The thresholds keep the measurements
// that set them (one H200; the dated sections of docs/perf-log.md hold the runs):
//   n = 1..4:  the matvecs read each weight byte once for all rows: BF16 35-37 us (cuBLAS 32), Q4_0 16-30 us
//              (cuBLAS on a bf16 copy reads 3.6x the bytes: 32 us) -> matvec (14336x4096).
//   n = 5..16: tiled matvec BF16 40-54 us, Q8_0 55-141 us, Q4_0 48-? us against cuBLAS 32 us flat -> a GEMM
//              when bf16 weights are at hand (BF16, or the load-time bf16 copy), else matvec (no per-call dequant).
//   n = 17..255: the Hopper GEMM walks 128-row tiles; at n = 64 a 14336-wide weight is 56-112 tiles for 132 SMs,
//              so most SMs idle while the weight streams -> the skinny GEMMs where they win, else cuBLASLt.
//   n >= 256:  the Hopper GEMM (0.89-1.06x cuBLASLt at 512..8192).
// Batch-invariant mode uses the Hopper GEMM with one tile for every n (cuda_backend.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cuda/matmul/matvec.cuh"
#include "core/cuda_tune.h"
#include "core/dtype.h"

namespace ferry::cuda_ops {

enum class MatmulKernel { kMatvec, kSkinnyMma, kSkinnyWgmma, kCublas, kGemmSm90 };
// Which kernel computes a SwiGLU inside the gate|up matmul (kNone: the matmul, then swiglu_fused).
enum class SwigluKernel { kNone, kStreamHalf, kStreamQuant, kGemmSm90 };

const char* matmul_kernel_name(MatmulKernel k);

// A matmul to plan: out (n, rows) = x (n, cols) . w^T through a prepared weight of `wtype`.
struct MatmulShape {
  DType wtype;
  int64_t rows, cols;  // the weight's (n_out, n_in)
  int64_t n;           // tokens
};

// What the backend has at hand for it.
struct MatmulCaps {
  bool bf16_weight = false;      // the weight is BF16 or keeps a bf16 copy (no per-call dequantization for a GEMM)
  bool sm90_gemm = false;        // ferry's Hopper GEMM exists on this device
  bool out_aligned = true;       // the output is 8-byte aligned (the Hopper GEMM's stores)
  bool skinny_wgmma = false;     // the wgmma skinny GEMM exists on this device
  bool batch_invariant = false;  // CudaBackendOptions::batch_invariant
  CudaTune tune{};               // FERRY_CUDA_TUNE's comparisons
  int n_sms = 0;                 // the device's SMs and opt-in shared memory per block (the streamed kernels' plans);
  size_t max_smem = 0;           // the plan needs no device, so it is tested on the host
};

struct MatmulPlan {
  MatmulKernel kernel = MatmulKernel::kMatvec;
  MatvecKernel matvec = MatvecKernel::kTiled;  // when kernel == kMatvec
  // Epilogues the kernel takes for this shape (MatvecParams' fields; all at one token on a streamed matvec):
  bool in_norm = false;       // the input's RMSNorm in the prologue (MatvecInNorm)
  bool residual_add = false;  // a residual add deferred into the output rows (MatvecResidualAdd)
  bool peer_push = false;     // the output rows pushed to the peers of a one-shot all-reduce (MatvecPeerPush)
  // For a stacked gate|up weight (rows = 2 hidden): the kernel that fuses the SwiGLU (with in_norm too where it is
  // kStreamQuant and in_norm is set).
  SwigluKernel swiglu = SwigluKernel::kNone;
};

MatmulPlan plan_matmul(const MatmulShape& s, const MatmulCaps& caps);

// The mma.sync skinny GEMM (skinny_mma.cuh) takes the cuBLASLt calls it beats: measured on one H200 (skinny_gemm_bench, weights streamed from HBM; speed-up over cuBLASLt of
// the best (tile, splits) of the sweep, which make_skinny_plan now picks; docs/perf-log.md "## 2026-11-30: the mma.sync skinny GEMM"):
//                 n = 8   16    32    56    64   128
//   6144 x 4096:   1.14  1.10  1.05  0.84  0.82  0.49      3072 x 4096 (TP=2 qkv): 1.32  1.13  1.10  0.92 ...
//   4096 x 4096:   1.24  1.09  1.05  0.81  0.79  0.53      4096 x 7168 (TP=2 down): 1.21  1.14  1.08  0.89 ...
//   28672 x 4096:  1.01  0.96  0.98  0.93  0.92  0.55      128256 x 4096: 1.03  0.99  1.00  0.96  0.93  0.54
// (mma.sync issue bound from n ~ 56: 228 TFLOP/s at n = 128). -> n <= 32 and at most 8192 weight rows (the
// shapes whose row tiles alone do not fill the SMs and that cuBLASLt leaves at 46-68% of the bandwidth).
// The wgmma skinny GEMM (skinny_wgmma.cuh) takes the cuBLASLt calls it beat. Measured on one H200
// (wgmma_skinny_bench, weights streamed from HBM, 10 back-to-back calls; docs/perf-log.md "## 2026-11-30: the wgmma skinny GEMM"): speed-up
// over cuBLASLt of the plan make_wg_skinny_plan now picks, read off the same run's sweep:
//                   n = 32    48    56    64    96   128   192   255
//   128256 x 4096:    1.06  1.04  1.07  1.07  0.96  0.97  0.96  0.93
//   28672 x 4096:     1.02  1.03  1.03  1.04  0.99  1.00  0.99  0.95   (n <= 64: 2 splits, 1.7 waves)
//   4096 x 14336:     1.01  1.03  1.03  1.05  1.02  0.97  1.03  0.97
//   4096 x 4096:      1.04  1.09  0.98  0.94  0.95  0.85  0.95  0.88
//   3072 x 4096 (TP=2 qkv):  1.11  1.07  1.05  0.94 ...    4096 x 7168 (TP=2 down): 1.03  1.04  1.03  0.92 ...
//   6144 x 4096:      1.01  1.01  0.99  0.97 ...      14336 x 4096 (TP=2): 0.98  1.00  0.99  1.02 ...
//   4096 x 2048 (TP=2 wo): 0.93  0.92  0.88  0.87 ...
// (cuBLASLt itself reached 56-92% of 4.30 TB/s at these shapes in this harness.) The first rule took the harness's
// clear wins only (n = 33..64 from 16384 rows or k >= 14336, n = 33..48 on <= 4096 rows), leaving the q|k|v (6144 x
// 4096) and wo (4096 x 4096) projections of a 64-row serving decode step on cuBLASLt (0.94-0.97 back to back). In
// situ they win: a captured decode step chains PDL launches, which cuBLASLt's kernels break (each waits for a full
// drain and ramps alone). Serving on one H200 (64 clients, 512/128, 2026-11-30, same call, one server each):
// decode-only steps (55 sequences, padded to 64) 6.254 ms with the first rule, 6.065 ms with the wgmma skinny GEMM
// for every 17..255-row matmul (FERRY_CUDA_TUNE=skinny=wgmma): -3.0%, 4,953 | 4,995 -> 4,999 | 5,038 tok/s.
// -> n = 33..64 wherever k >= 4096 (Llama-3-8B's qkv, wo, gate|up, down and lm head; TP=2 shards but wo, whose
// k = 2048 lost 0.87-0.93 in the harness); cuBLASLt above 64 rows (0.82-0.97 at n = 96..255) and at k < 4096.
// The matvec kernel at one token (matvec_bench on one H200, % of 4.30 TB/s; the columns are the kernels as they
// were numbered then: v2 kRowBlocks, v5 kTiled, v7 and v9 kStreamHalf's row-by-row and stage-batched consumers, v10
// kStreamQuant; docs/perf-log.md "## 2026-11-29: CUDA decode matvec"):
//   BF16            v2     v5     v7     v9
//   14336 x 4096    -      80.9   71.0   97.3       4096 x 14336 (down)    -     65.9   93.6   97.7
//   28672 x 4096    83.6   47.7   75.2  101.0       128256 x 4096 (lm)    94.8   49.2   78.1  105.4
//   6144 x 4096     56.2   68.7   62.0   85.3       4096 x 4096 (wo)       -     63.3   55.7   78.7
//   3072 x 4096     41.5   60.4   52.1   73.1       4096 x 2048            45.3   55.6   37.7   59.0
// -> BF16/F16: kStreamHalf's stage-batched consumer wherever it applies (ferry bench tg128, Llama-3-8B BF16: 244.2
// tok/s against 200.3 under the rule before it); else its row-by-row consumer from 7168 columns where that applies;
// else kRowBlocks for BF16 from 16384 rows (kTiled falls far below it once a block owns many row groups); kTiled
// otherwise.
//   Q4_0 v5 -> v10: 14336 x 4096 47.7 -> 69.5, 4096 x 14336 53.5 -> 61.3, 28672 x 4096 65.0 -> 83.1, 6144 x 4096
//         36.1 -> 43.8, 4096 x 4096 35.2 -> 40.3, 128256 x 4096 66.3 -> 99.3; tg128 (Llama-3-8B): 399.3 -> 427.1
//   Q8_0: 61.9 -> 85.8, 63.1 -> 78.5, 77.0 -> 94.7, 49.1 -> 71.4, 45.3 -> 58.4, 87.4 -> 103.3; tg128 268.3 -> 347.2
//         once the streamed blocks ask for one SM each (stream_plan.cuh one_block_per_sm)
//   Q4_K: 14336 x 4096 35.5 -> 56.6, 4096 x 14336 40.6 -> 45.7, 28672 x 4096 43.7 -> 66.4, 6144 x 4096 27.6 ->
//         40.1, 4096 x 4096 24.7 -> 35.6
// -> Q8_0/Q4_0/Q4_K: kStreamQuant wherever it applies, else kTiled (which beat the row-by-row quantized stream at
// every shape, e.g. Q4_0 128256 x 4096 66.3% vs 41.7%, so that stream was retired).
// Streamed matvecs keep at most CudaTune::ring_quant = 3 ring stages in flight per block on quantized weights and
// no cap on BF16 (docs/perf-log.md "## 2026-11-30: the ring cap").
// The mma.sync skinny GEMM's reach (its table above): n <= 32 and at most 8192 weight rows.
inline constexpr int64_t kSkinnyMaxTokensUsed = 32;
inline constexpr int64_t kSkinnyMaxRowsUsed = 8192;
// The wgmma skinny GEMM's (its table above): n = 33..64 wherever k >= 4096.
inline constexpr int64_t kWgSkinnyMinTokensUsed = 33;
inline constexpr int64_t kWgSkinnyMaxTokensUsed = 64;
inline constexpr int64_t kWgSkinnyMinCols = 4096;

}  // namespace ferry::cuda_ops
