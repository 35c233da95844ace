// Which kernel runs a matmul of n tokens (CudaBackend::matmul). Measured on one H200 (docs/perf-log.md,
// "Serving on the H200"), weight 14336x4096:
//   n = 1..4:  matvec v5 reads each weight byte once for all rows: BF16 35-37 us (cuBLAS 32), Q4_0 16-30 us
//              (cuBLAS on a bf16 copy reads 3.6x the bytes: 32 us) -> matvec.
//   n = 5..16: v5 BF16 40-54 us, Q8_0 55-141 us, Q4_0 48-? us against cuBLAS 32 us flat -> cuBLASLt when
//              bf16 weights are at hand (BF16, or the load-time bf16 copy), else matvec (no per-call dequant).
//   n = 17..255: ferry's Hopper GEMM walks 128-row tiles; at n = 64 a 14336-wide weight is 56-112 tiles for
//              132 SMs, so most SMs idle while the weight streams (a serving decode step of 54 sequences took
//              23.5 ms); cuBLASLt splits K for skinny shapes -> cuBLASLt.
//   n >= 256:  the Hopper GEMM (0.89-1.06x cuBLASLt at 512..8192).
// Batch-invariant mode uses the Hopper GEMM with one tile for every n (cuda_backend.h).
#pragma once

#include <cstdint>

namespace ferry::cuda_ops {

enum class MatmulPath { Matvec, Cublas, HopperGemm, Skinny, WgSkinny };

// FERRY_CUDA_SKINNY (comparisons in situ, where PDL and the neighbouring kernels count): the measured rule below;
// or, for n = 17..255 wherever the kernel supports the shape, the wgmma skinny GEMM (Wg) or the mma.sync skinny
// GEMM (Mma) instead of cuBLASLt / the rule's pick.
enum class SkinnyOverride { Rule, Wg, Mma };

// skinny_fits: skinny_gemm_supports(n, weight_rows, k) (skinny_gemm.cuh). The skinny GEMM takes the cuBLASLt
// calls it beats: measured on one H200 (skinny_gemm_bench, weights streamed from HBM; speed-up over cuBLASLt of
// the best (tile, splits) of the sweep, which make_skinny_plan now picks; docs/perf-log.md "## skinny"):
//                 n = 8   16    32    56    64   128
//   6144 x 4096:   1.14  1.10  1.05  0.84  0.82  0.49      3072 x 4096 (TP=2 qkv): 1.32  1.13  1.10  0.92 ...
//   4096 x 4096:   1.24  1.09  1.05  0.81  0.79  0.53      4096 x 7168 (TP=2 down): 1.21  1.14  1.08  0.89 ...
//   28672 x 4096:  1.01  0.96  0.98  0.93  0.92  0.55      128256 x 4096: 1.03  0.99  1.00  0.96  0.93  0.54
// (mma.sync issue bound from n ~ 56: 228 TFLOP/s at n = 128). -> n <= 32 and at most 8192 weight rows (the
// shapes whose row tiles alone do not fill the SMs and that cuBLASLt leaves at 46-68% of the bandwidth).
inline constexpr int64_t kSkinnyMaxTokensUsed = 32;
inline constexpr int64_t kSkinnyMaxRowsUsed = 8192;

// wg_skinny_fits: a WgSkinnyGemm is available and wg_skinny_supports(n, weight_rows, k) (wgmma_skinny.cuh);
// weight_cols: k. The wgmma skinny GEMM takes the cuBLASLt calls it beat. Measured on one H200
// (wgmma_skinny_bench, weights streamed from HBM, 10 back-to-back calls; docs/perf-log.md "## wgskinny"): speed-up
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
// drain and ramps alone). Serving on one H200 (64 clients, 512/128, session 9, same call, one server each):
// decode-only steps (55 sequences, padded to 64) 6.254 ms with the first rule, 6.065 ms with the wgmma skinny GEMM
// for every 17..255-row matmul (FERRY_CUDA_SKINNY=wg): -3.0%, 4,953 | 4,995 -> 4,999 | 5,038 tok/s.
// -> n = 33..64 wherever k >= 4096 (Llama-3-8B's qkv, wo, gate|up, down and lm head; TP=2 shards but wo, whose
// k = 2048 lost 0.87-0.93 in the harness); cuBLASLt above 64 rows (0.82-0.97 at n = 96..255) and at k < 4096.
inline constexpr int64_t kWgSkinnyMinTokensUsed = 33;
inline constexpr int64_t kWgSkinnyMaxTokensUsed = 64;
inline constexpr int64_t kWgSkinnyMinCols = 4096;

inline bool wg_skinny_wins(int64_t n, int64_t weight_rows, int64_t weight_cols) {
  (void)weight_rows;  // every row count measured won or tied in situ at k >= 4096
  return n >= kWgSkinnyMinTokensUsed && n <= kWgSkinnyMaxTokensUsed && weight_cols >= kWgSkinnyMinCols;
}

inline MatmulPath choose_matmul_path(int64_t n, bool bf16_weights_at_hand, bool hopper_gemm_fits,
                                     bool batch_invariant, bool skinny_fits = false, int64_t weight_rows = 0,
                                     bool wg_skinny_fits = false, int64_t weight_cols = 0,
                                     SkinnyOverride skinny_override = SkinnyOverride::Rule) {
  if (batch_invariant) return MatmulPath::HopperGemm;
  if (n <= 4) return MatmulPath::Matvec;
  if (n > 16 && n < 256 && skinny_override == SkinnyOverride::Wg && wg_skinny_fits) return MatmulPath::WgSkinny;
  if (n > 16 && n < 256 && skinny_override == SkinnyOverride::Mma && skinny_fits) return MatmulPath::Skinny;
  if (skinny_fits && n <= kSkinnyMaxTokensUsed && weight_rows <= kSkinnyMaxRowsUsed &&
      (n > 16 || bf16_weights_at_hand)) {
    return MatmulPath::Skinny;
  }
  if (wg_skinny_fits && wg_skinny_wins(n, weight_rows, weight_cols)) return MatmulPath::WgSkinny;
  if (n <= 16) return bf16_weights_at_hand ? MatmulPath::Cublas : MatmulPath::Matvec;
  if (n < 256 || !hopper_gemm_fits) return MatmulPath::Cublas;
  return MatmulPath::HopperGemm;
}

// The decode matvec version for a weight of rows x cols at n tokens. `forced` is FERRY_CUDA_MATVEC (0 when
// unset): 2 or 5 run that version everywhere; 9 runs v9 where it applies, else v7 where it applies, else 5; 7 runs
// version 7 wherever it applies (stream_applies: matvec_stream_applies) and the rule elsewhere. batched_applies:
// version 9 takes the shape (matvec_stream_applies(..., batched = true)). The rule, from matvec_bench on one H200
// (% of 4.30 TB/s at n = 1, BF16; session 5):
//                   v2     v5     v7     v9
//   14336 x 4096    -      80.9   71.0   97.3       4096 x 14336 (down)    -     65.9   93.6   97.7
//   28672 x 4096    83.6   47.7   75.2  101.0       128256 x 4096 (lm)    94.8   49.2   78.1  105.4
//   6144 x 4096     56.2   68.7   62.0   85.3       4096 x 4096 (wo)       -     63.3   55.7   78.7
//   3072 x 4096     41.5   60.4   52.1   73.1       4096 x 2048            45.3   55.6   37.7   59.0
// -> v9 for BF16/F16 at n = 1 wherever it applies (ferry bench tg128, Llama-3-8B BF16: 244.2 tok/s against 200.3
// under the previous rule in the same call); else v7 from 7168 columns where it applies; else v2 for BF16 at n = 1
// from 16384 rows (v5 falls far below v2 once a block owns many row groups); v5 otherwise (quantized types where
// v10 does not apply: v5 beats v7 at every shape, e.g. Q4_0 128256 x 4096 66.3% vs 41.7%).
// half_weight: BF16 or F16 (version 7 for Q8_0/Q4_0 runs only when forced: measured slower than v5). For Q8_0/Q4_0,
// batched_applies is matvec_v10_applies (version 10, matvec_v10.cuh: the stage-batched stream with a dp4a
// consumer); forced 10 runs it wherever it applies and the rule elsewhere. Version 10 measured on one H200
// (docs/perf-log.md "## qv9"; matvec_bench --quick, % of 4.30 TB/s at n = 1, v5 -> v10, same run):
//   Q4_0: 14336 x 4096 47.7 -> 69.5, 4096 x 14336 53.5 -> 61.3, 28672 x 4096 65.0 -> 83.1, 6144 x 4096 36.1 ->
//         43.8, 4096 x 4096 35.2 -> 40.3, 128256 x 4096 66.3 -> 99.3; ferry bench tg128 (Llama-3-8B): 399.3 -> 427.1
//   Q8_0: 61.9 -> 85.8, 63.1 -> 78.5, 77.0 -> 94.7, 49.1 -> 71.4, 45.3 -> 58.4, 87.4 -> 103.3; tg128 264.2 ->
//         256.5 with 2 blocks per SM possible, 268.3 -> 347.2 once v9/v10 blocks ask for one SM each
//         (matvec_stream_plan.cuh one_block_per_sm; session 5, call 2)
// -> v10 for Q8_0/Q4_0 at n = 1 wherever it applies (batched_applies is only true for them).
// Session 6 (helper qv11, docs/perf-log.md "## qv11", same run): v10 on Q4_K (GGUF super-blocks streamed as stored)
// against v5: 14336 x 4096 35.5 -> 56.6, 4096 x 14336 40.6 -> 45.7, 28672 x 4096 43.7 -> 66.4, 6144 x 4096 27.6 ->
// 40.1, 4096 x 4096 24.7 -> 35.6 (wins everywhere: the rule takes it once the backend passes matvec_v10_applies as
// batched_applies for Q4_K too); v11 (v10 with 16 consumer warps) 0.94-1.03x of v10 on every shape and type ->
// removed.
inline int choose_matvec_version(bool bf16_weight, bool half_weight, int64_t n, int64_t rows, int64_t cols,
                                 bool stream_applies, bool batched_applies, int forced, int default_version) {
  if (forced == 10) {  // version 10 for the quantized types where it applies, else the rule
    if (!half_weight && batched_applies) return forced;
    forced = 0;
  }
  if (forced == 2 || forced == 5) return forced;
  if (forced == 9) return 9;  // matvec() falls back to v7, then v5, where v9 does not apply
  if (forced == 0 && n == 1 && batched_applies) return half_weight ? 9 : 10;
  if (stream_applies && (forced == 7 || (forced == 0 && half_weight && n == 1 && cols >= 7168))) return 7;
  if (bf16_weight && n == 1 && rows >= 16384) return 2;
  return default_version;
}

}  // namespace ferry::cuda_ops
