// The matmul plan: which kernel runs a matmul of n tokens through a prepared weight, and which epilogues that kernel
// takes for the shape. Every caller in the backend (matmul, matmul_swiglu, the decode-layer fusion, the tensor-
// parallel push) asks plan_matmul and nothing else re-derives eligibility. The rules, each from a measurement on one
// H200 (docs/perf-log.md holds the runs, under the sections named):
//   n = 1..4:   the matvecs, which read each weight byte once for all rows ("2026-11-29: CUDA decode matvec").
//   n = 5..16:  a GEMM when bf16 weights are at hand (BF16, or the load-time bf16 copy), else the tiled matvec (no
//               per-call dequantization).
//   n = 17..255: the skinny GEMMs where they beat cuBLASLt, else cuBLASLt: a 128-row-tile GEMM leaves most SMs idle
//               while a wide weight streams ("2026-11-30: the mma.sync skinny GEMM", "... the wgmma skinny GEMM").
//   n >= 256:   the Hopper GEMM.
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

// A matmul to plan: out (n, rows) = x (n, cols) . w^T through a prepared weight of `wtype`, or through a stacked
// weight of two types (DType::Stacked, a K-quant mix's q|k|v: CudaBackend::prepare_stacked_weight): its first
// rows - tail_rows rows of `wtype` (the head), then tail_rows rows of `tail_type`.
struct MatmulShape {
  DType wtype;
  int64_t rows, cols;  // the weight's (n_out, n_in)
  int64_t n;           // tokens
  int64_t tail_rows = 0;          // > 0: a stacked weight (its tail's rows)
  DType tail_type = DType::F32;   // the stacked weight's tail type
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

// A stacked weight (MatmulShape::tail_rows > 0) at one token: one streamed quantized matvec whose blocks take the
// parts by row range (stream_quant_stacked), with the norm in its prologue where both parts' types take it; no
// residual add, peer push or SwiGLU. At more tokens the GEMMs over the stack's bf16 rows (its copy, or both parts
// dequantized into one (rows, cols) matrix per call): every matvec path is cut at 1 token (a stacked weight is kept
// only where that launch takes it: stack_worth_it).
// Whether a backend should stack parts of these types at all: where the one-token plan streams them in one launch
// (else the parts stay apart, each on its own plan).
bool stack_worth_it(const MatmulShape& s, const MatmulCaps& caps);

// The matvec at one token: BF16/F16 the stage-batched stream (kStreamHalf) wherever it applies, else its row-by-row
// consumer from 7168 columns, else kRowBlocks for BF16 from 16384 rows, else kTiled; the quantized types kStreamQuant
// wherever it applies, else kTiled ("2026-11-29: CUDA decode matvec", "2026-12-02: ... the K-quants in the stream").
// Streamed matvecs keep at most CudaTune::ring_quant = 3 ring stages in flight per block on quantized weights and no
// cap on BF16 ("2026-11-30: the ring cap").
// The mma.sync skinny GEMM's reach: n <= 32 and at most 8192 weight rows (the shapes whose row tiles alone do not
// fill the SMs and that cuBLASLt leaves at 46-68% of the bandwidth; mma.sync is issue-bound from n ~ 56).
inline constexpr int64_t kSkinnyMaxTokensUsed = 32;
inline constexpr int64_t kSkinnyMaxRowsUsed = 8192;
// The wgmma skinny GEMM's: n = 33..64 wherever k >= 4096 (it won in situ, where a captured step chains PDL launches
// that cuBLASLt's kernels break; k = 2048 lost).
inline constexpr int64_t kWgSkinnyMinTokensUsed = 33;
inline constexpr int64_t kWgSkinnyMaxTokensUsed = 64;
inline constexpr int64_t kWgSkinnyMinCols = 4096;

}  // namespace ferry::cuda_ops
