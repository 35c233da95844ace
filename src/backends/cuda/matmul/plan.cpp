// The matmul plan (plan.h): the rule, then the epilogues the chosen kernel takes.
#include "backends/cuda/matmul/plan.h"

#include "backends/cuda/matmul/gemm_sm90.cuh"
#include "backends/cuda/matmul/skinny_mma.cuh"
#include "backends/cuda/matmul/skinny_wgmma.cuh"
#include "backends/cuda/matmul/stream_half.cuh"
#include "backends/cuda/matmul/stream_quant.cuh"

namespace ferry::cuda_ops {
namespace {

bool half_type(DType t) { return t == DType::BF16 || t == DType::F16; }

MatmulKernel choose_kernel(const MatmulShape& s, const MatmulCaps& c) {
  const int64_t n = s.n;
  if (c.batch_invariant) return MatmulKernel::kGemmSm90;
  if (n <= 4) return MatmulKernel::kMatvec;
  const bool mma_fits = skinny_gemm_supports(n, s.rows, s.cols);
  const bool wg_fits = c.skinny_wgmma && wg_skinny_supports(n, s.rows, s.cols);
  if (n > 16 && n < 256 && c.tune.skinny == SkinnyTune::kWgmma && wg_fits) return MatmulKernel::kSkinnyWgmma;
  if (n > 16 && n < 256 && c.tune.skinny == SkinnyTune::kMma && mma_fits) return MatmulKernel::kSkinnyMma;
  if (mma_fits && n <= kSkinnyMaxTokensUsed && s.rows <= kSkinnyMaxRowsUsed && (n > 16 || c.bf16_weight))
    return MatmulKernel::kSkinnyMma;
  if (wg_fits && n >= kWgSkinnyMinTokensUsed && n <= kWgSkinnyMaxTokensUsed && s.cols >= kWgSkinnyMinCols)
    return MatmulKernel::kSkinnyWgmma;
  if (n <= 16) return c.bf16_weight ? MatmulKernel::kCublas : MatmulKernel::kMatvec;
  if (n < 256 || !c.sm90_gemm || !c.out_aligned || !Sm90Gemm::supports(n, s.rows, s.cols)) return MatmulKernel::kCublas;
  return MatmulKernel::kGemmSm90;
}

bool half_stream(const MatmulShape& s, const MatmulCaps& c, StreamConsumer consumer) {
  return half_type(s.wtype) && stream_half_supports(s.wtype, int(s.n), s.rows, s.cols, c.n_sms, c.max_smem, consumer);
}

MatvecKernel choose_matvec(const MatmulShape& s, const MatmulCaps& c) {
  const int n = int(s.n);
  if (c.tune.matvec == MatvecTune::kRows && matvec_kernel_applies(MatvecKernel::kRowBlocks, s.wtype, n, s.rows, s.cols))
    return MatvecKernel::kRowBlocks;
  if (c.tune.matvec != MatvecTune::kRule) return MatvecKernel::kTiled;
  if (n != 1) return MatvecKernel::kTiled;
  if (stream_quant_supports(s.wtype, 1, s.rows, s.cols, c.n_sms, c.max_smem)) return MatvecKernel::kStreamQuant;
  if (!half_type(s.wtype)) return MatvecKernel::kTiled;
  if (half_stream(s, c, StreamConsumer::kStageBatched)) return MatvecKernel::kStreamHalf;
  if (s.cols >= 7168 && half_stream(s, c, StreamConsumer::kRowByRow)) return MatvecKernel::kStreamHalf;
  if (s.wtype == DType::BF16 && s.rows >= 16384) return MatvecKernel::kRowBlocks;
  return MatvecKernel::kTiled;
}

}  // namespace

const char* matmul_kernel_name(MatmulKernel k) {
  switch (k) {
    case MatmulKernel::kMatvec: return "matvec";
    case MatmulKernel::kSkinnyMma: return "skinny_mma";
    case MatmulKernel::kSkinnyWgmma: return "skinny_wgmma";
    case MatmulKernel::kCublas: return "cublaslt";
    case MatmulKernel::kGemmSm90: return "gemm_sm90";
  }
  return "?";
}

namespace {

// A stacked weight's plan (plan.h).
MatmulPlan plan_stacked(const MatmulShape& s, const MatmulCaps& c) {
  MatmulPlan p;
  p.kernel = choose_kernel(s, c);
  const int64_t head_rows = s.rows - s.tail_rows;
  const bool stream = p.kernel == MatmulKernel::kMatvec && s.n == 1 && c.tune.matvec == MatvecTune::kRule &&
                      stream_quant_stacked_supports(s.wtype, head_rows, s.tail_type, s.tail_rows, s.cols, c.n_sms,
                                                    c.max_smem);
  if (stream) {
    p.matvec = MatvecKernel::kStreamQuant;
    p.in_norm = stream_quant_in_norm_applies(s.wtype, s.cols) && stream_quant_in_norm_applies(s.tail_type, s.cols);
  } else if (p.kernel == MatmulKernel::kMatvec) {
    p.kernel = MatmulKernel::kCublas;  // no matvec reads a stack of two layouts but the streamed one
  }
  return p;
}

}  // namespace

bool stack_worth_it(const MatmulShape& s, const MatmulCaps& c) {
  if (s.tail_rows <= 0 || s.tail_rows >= s.rows) return false;
  MatmulShape one = s;
  one.n = 1;
  const MatmulPlan p = plan_stacked(one, c);
  return p.kernel == MatmulKernel::kMatvec && p.matvec == MatvecKernel::kStreamQuant;
}

MatmulPlan plan_matmul(const MatmulShape& s, const MatmulCaps& c) {
  if (s.tail_rows > 0) return plan_stacked(s, c);
  MatmulPlan p;
  p.kernel = choose_kernel(s, c);
  if (p.kernel == MatmulKernel::kMatvec) p.matvec = choose_matvec(s, c);
  const bool one = p.kernel == MatmulKernel::kMatvec && s.n == 1;
  const bool quant_stream = one && p.matvec == MatvecKernel::kStreamQuant;
  p.in_norm = quant_stream && stream_quant_in_norm_applies(s.wtype, s.cols);
  p.residual_add = quant_stream;
  p.peer_push = quant_stream ||
                (one && p.matvec == MatvecKernel::kStreamHalf && half_stream(s, c, StreamConsumer::kStageBatched));
  // SwiGLU: the one-token BF16/F16 stream wherever the matvec rule runs (it has its own plan), the quantized
  // stream where the plain matmul streams too, the Hopper GEMM's epilogue where that GEMM would run.
  if (s.rows % 2 == 0) {
    if (s.n == 1 && half_type(s.wtype) && !c.batch_invariant && c.tune.matvec == MatvecTune::kRule &&
        stream_half_swiglu_supports(s.wtype, 1, s.rows, s.cols, c.n_sms, c.max_smem)) {
      p.swiglu = SwigluKernel::kStreamHalf;
    } else if (quant_stream && stream_quant_swiglu_supports(s.wtype, 1, s.rows, s.cols, c.n_sms, c.max_smem)) {
      p.swiglu = SwigluKernel::kStreamQuant;
    } else if (c.sm90_gemm && (c.batch_invariant || s.n >= 256) && Sm90Gemm::supports_swiglu(s.n, s.rows / 2, s.cols)) {
      p.swiglu = SwigluKernel::kGemmSm90;
    }
  }
  return p;
}

}  // namespace ferry::cuda_ops
