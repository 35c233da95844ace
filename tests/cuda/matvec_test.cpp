// The decode matvec kernels (n <= 16 tokens) against the CPU reference (dot_ref: dequantize, fp32 dot) on
// random data, every native weight type, every token count 1..16 and odd shapes (rows not a multiple of a
// block's 16 rows, columns that leave the last unrolled chunks empty, K tiles that end mid-row).
// Each case runs through CudaBackend::matmul (the plan's kernel) and through cuda_ops::matvec directly with every
// kernel that takes the shape (MatvecKernel: matvec.cuh), so every kernel stays tested.
// Tolerance: relative L2 <= 1e-4 for every type (kRowBlocks keeps activations in fp32 and feeds the quantized
// values into the products exactly, matvec.cuh), far inside the 1e-3 allowed for quantized weights.
// kTiled quantizes the activations for Q8_0/Q4_0/Q4_1/Q4_K into two int8 levels per 32 values (~2e-5 relative)
// and splits them into bf16 hi + lo for the BF16 tensor-core path: held to kTol against the f32 reference here,
// and, in TiledMatchesQuantizedActivations, to 1e-5 against the CPU reference fed the same quantized activations
// (only the summation order differs there).
#ifdef FERRY_HAS_CUDA

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <cuda_runtime.h>

#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/matmul/plan.h"
#include "backends/cuda/matmul/stream_half.cuh"
#include "backends/cuda/matmul/stream_quant.cuh"
#include "backends/cuda/matmul/weight_layout.cuh"
#include "cuda_test_util.h"
#include "formats/quant.h"

namespace ferry::test {
namespace {

constexpr double kTol = 1e-4;
constexpr cuda_ops::MatvecKernel kKernels[] = {cuda_ops::MatvecKernel::kRowBlocks, cuda_ops::MatvecKernel::kTiled,
                                              cuda_ops::MatvecKernel::kStreamHalf, cuda_ops::MatvecKernel::kStreamQuant};
// kStreamQuant's one-level activations (MatvecParams::one_level_acts; the backend's default at one token,
// off in these tests' backend: cuda_test_util.h):
// ~0.5% per value, more on rows whose sum cancels (the host emulation's worst case, 2 x 16384: 1.35e-2).
constexpr double kOneLevelTol = 3e-2;

class CudaMatvec : public CudaOpsTest {
 protected:
  // Returns the worst relative L2 of the backend's matvec path and every kernel (all held to kTol). x_scale
  // multiplies the activations; outlier (> 0) makes every 97th column that many times larger.
  double run(DType type, int64_t n, int64_t n_out, int64_t n_in, bool bias, uint32_t seed, float x_scale = 1.0f,
             float outlier = 0.0f) {
    const std::vector<float> f = random_floats(size_t(n_out * n_in), seed, 0.5f);
    std::vector<uint8_t> w(size_t(n_out) * row_bytes(type, n_in));
    for (int64_t r = 0; r < n_out; ++r)
      quantize_row(type, f.data() + r * n_in, w.data() + size_t(r) * row_bytes(type, n_in), n_in);
    // Activations with a per-column offset (a non-zero mean per block, as real hidden states have), so the
    // block-sum correction of Q4_0/Q4_1 is exercised.
    std::vector<float> x = random_floats(size_t(n * n_in), seed + 1);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = (x[i] + 0.3f * float((i % size_t(n_in)) % 7) - 0.9f) * x_scale;
      if (outlier > 0.0f && (i % size_t(n_in)) % 97 == 3) x[i] *= outlier;
    }
    std::vector<float> b = random_floats(size_t(n_out), seed + 2);
    const Tensor hw = Tensor::make(type, {n_out, n_in}, w.data());
    std::vector<float> ref(size_t(n * n_out));
    cpu_.matmul(host(DType::F32, {n, n_out}, ref), host(DType::F32, {n, n_in}, x), hw,
                bias ? host(DType::F32, {n_out}, b) : Tensor{});
    const Tensor gw = gpu_->prepare_weight(hw, keep_);
    const Tensor out = poisoned({n, n_out});
    const Tensor gx = upload(DType::F32, {n, n_in}, x);
    const Tensor gb = bias ? upload(DType::F32, {n_out}, b) : Tensor{};
    gpu_->matmul(out, gx, gw, gb);
    double worst = 0;
    {
      // The backend's own plan (matmul/plan.h): bf16 weights with 5..16 tokens go to a GEMM, which rounds the
      // activations to bf16 (8-bit mantissa: ~2e-3 relative): the GEMM path's bound, 1e-2.
      const double err = rel_l2(download(out), ref);
      if (n <= 4 || type != DType::BF16)
        worst = err;
      else
        EXPECT_LE(err, 1e-2) << dtype_name(type) << " backend (cuBLASLt) n=" << n;
    }
    // Every kernel that takes the shape, directly (the prepared weight's layout: weight_layout.cuh).
    const bool split = cuda_ops::is_split_type(type);
    const cuda_ops::WeightView view{static_cast<const uint8_t*>(gw.data), n_out, n_in,
                                    split ? cuda_ops::scales_offset(type, n_out, n_in) : 0};
    for (const cuda_ops::MatvecKernel kernel : kKernels) {
      if (!cuda_ops::matvec_kernel_applies(kernel, type, int(n), n_out, n_in)) continue;
      const Tensor o = poisoned({n, n_out});
      void* scratch = this->scratch(type, kernel, n, n_in);
      gpu_->synchronize();  // the backend's stream is done with the inputs and the poison before ours starts
      cuda_ops::matvec(type, {.w = view, .x = gx.ptr<float>(), .bias = bias ? gb.ptr<float>() : nullptr,
                              .out = o.ptr<float>(), .n_tokens = int(n), .kernel = kernel, .scratch = scratch},
                       nullptr);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const double err = rel_l2(download(o), ref);
      EXPECT_LE(err, kTol) << dtype_name(type) << " " << cuda_ops::matvec_kernel_name(kernel) << " n=" << n << " " << n_out << "x" << n_in
                          << " x_scale " << x_scale << " outlier " << outlier;
      worst = std::max(worst, err);
    }
    // kStreamQuant with one-level activations, where it applies (one token).
    if (n == 1 && cuda_ops::stream_quant_applies(type, 1, n_out, n_in)) {
      const Tensor o = poisoned({n, n_out});
      gpu_->synchronize();
      cuda_ops::matvec(type, {.w = view, .x = gx.ptr<float>(), .bias = bias ? gb.ptr<float>() : nullptr,
                              .out = o.ptr<float>(), .n_tokens = 1, .kernel = cuda_ops::MatvecKernel::kStreamQuant,
                              .one_level_acts = true},
                       nullptr);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LE(rel_l2(download(o), ref), kOneLevelTol)
          << dtype_name(type) << " stream_quant one level " << n_out << "x" << n_in << " x_scale " << x_scale;
    }
    return worst;
  }
  // Device scratch for (type, kernel, n, n_in), or null when the kernel needs none.
  void* scratch(DType type, cuda_ops::MatvecKernel kernel, int64_t n, int64_t n_in) {
    const size_t bytes = cuda_ops::matvec_scratch_bytes(type, kernel, int(n), n_in);
    if (bytes == 0) return nullptr;
    keep_.push_back(gpu_->alloc(bytes));
    return keep_.back().data();
  }
};

// The matmul plan (matmul/plan.h) on the Llama-3-8B shapes, host only (runs without a device: the H200's SM count
// and shared memory are given): the measured winners stay where they won, and a tuning choice only replaces what
// it names.
cuda_ops::MatmulCaps h200_caps(bool bf16_weight = true) {
  return {.bf16_weight = bf16_weight, .sm90_gemm = true, .skinny_wgmma = true, .n_sms = 132, .max_smem = 232448};
}
cuda_ops::MatmulPlan plan_of(DType t, int64_t rows, int64_t cols, int64_t n, cuda_ops::MatmulCaps caps) {
  return cuda_ops::plan_matmul({.wtype = t, .rows = rows, .cols = cols, .n = n}, caps);
}

TEST(MatmulPlan, MatvecRuleOnLlama3Shapes) {  // host only
  using cuda_ops::MatvecKernel;
  const auto mv = [](DType t, int64_t rows, int64_t cols, int64_t n = 1, CudaTune tune = {}) {
    cuda_ops::MatmulCaps caps = h200_caps(t == DType::BF16);
    caps.tune = tune;
    const cuda_ops::MatmulPlan p = plan_of(t, rows, cols, n, caps);
    EXPECT_EQ(p.kernel, cuda_ops::MatmulKernel::kMatvec) << rows << "x" << cols;
    return p.matvec;
  };
  // BF16/F16 at one token: the stream wherever it applies; kRowBlocks from 16384 rows where it does not.
  EXPECT_EQ(mv(DType::BF16, 4096, 14336), MatvecKernel::kStreamHalf);    // down
  EXPECT_EQ(mv(DType::BF16, 28672, 4096), MatvecKernel::kStreamHalf);    // fused gate/up
  EXPECT_EQ(mv(DType::BF16, 128256, 4096), MatvecKernel::kStreamHalf);   // lm head
  EXPECT_EQ(mv(DType::BF16, 6144, 4096), MatvecKernel::kStreamHalf);     // fused q|k|v
  EXPECT_EQ(mv(DType::F16, 4096, 4096), MatvecKernel::kStreamHalf);      // wo
  EXPECT_EQ(mv(DType::BF16, 9216, 2304), MatvecKernel::kStreamHalf);     // Gemma 2 2B gate, up (3 rows a stage)
  EXPECT_EQ(mv(DType::BF16, 4096, 2304), MatvecKernel::kStreamHalf);     // its fused q|k|v
  EXPECT_EQ(mv(DType::BF16, 10240, 2560), MatvecKernel::kStreamHalf);    // Gemma 3 4B gate, up
  EXPECT_EQ(mv(DType::BF16, 20000, 576), MatvecKernel::kRowBlocks);      // no stream: 576 columns
  EXPECT_EQ(mv(DType::BF16, 4096, 576), MatvecKernel::kTiled);
  EXPECT_EQ(mv(DType::BF16, 4096, 14336, 2), MatvecKernel::kTiled);      // two tokens
  // Q8_0 / Q4_0 / Q4_K / Q5_K / Q6_K at one token: the quantized stream wherever it applies, kTiled elsewhere.
  for (const DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    EXPECT_EQ(mv(t, 4096, 14336), MatvecKernel::kStreamQuant) << dtype_name(t);
    EXPECT_EQ(mv(t, 28672, 4096), MatvecKernel::kStreamQuant) << dtype_name(t);
    EXPECT_EQ(mv(t, 4096, 768), MatvecKernel::kTiled) << dtype_name(t);  // not a multiple of 512
    EXPECT_EQ(mv(t, 4096, 14336, 3), MatvecKernel::kTiled) << dtype_name(t);
  }
  EXPECT_EQ(mv(DType::Q4_1, 4096, 4096), MatvecKernel::kTiled);
  // Q2_K / Q3_K: no stream of their own; the tiled matvec (dp4a paths) at 1..16 tokens, even under matvec=rows
  // (the row-block kernel is not built for them).
  for (const DType t : {DType::Q2_K, DType::Q3_K}) {
    EXPECT_EQ(mv(t, 4096, 14336), MatvecKernel::kTiled) << dtype_name(t);
    EXPECT_EQ(mv(t, 28672, 4096), MatvecKernel::kTiled) << dtype_name(t);
    EXPECT_EQ(mv(t, 4096, 4096, 1, CudaTune{.matvec = MatvecTune::kRows}), MatvecKernel::kTiled) << dtype_name(t);
    EXPECT_FALSE(cuda_ops::matvec_kernel_applies(MatvecKernel::kRowBlocks, t, 1, 4096, 4096)) << dtype_name(t);
    EXPECT_TRUE(cuda_ops::matvec_kernel_applies(MatvecKernel::kTiled, t, 16, 4096, 4096)) << dtype_name(t);
  }
  EXPECT_EQ(mv(DType::Q6_K, 4096, 1024), MatvecKernel::kTiled);  // Q6_K streams multiples of 2048 columns
  EXPECT_EQ(mv(DType::Q5_K, 4096, 1024), MatvecKernel::kStreamQuant);
  // FERRY_CUDA_TUNE=matvec=...: the named kernel everywhere it takes the shape.
  EXPECT_EQ(mv(DType::BF16, 28672, 4096, 1, CudaTune{.matvec = MatvecTune::kTiled}), MatvecKernel::kTiled);
  EXPECT_EQ(mv(DType::Q4_0, 4096, 14336, 1, CudaTune{.matvec = MatvecTune::kRows}), MatvecKernel::kRowBlocks);
}

TEST(MatmulPlan, EpiloguesFollowTheKernel) {  // host only
  const cuda_ops::MatmulCaps caps = h200_caps(false);
  // One Q8_0 token: the stream takes the norm prologue, the residual add and the peer push; the stacked gate|up
  // weight its SwiGLU form.
  cuda_ops::MatmulPlan p = plan_of(DType::Q8_0, 6144, 4096, 1, caps);
  EXPECT_TRUE(p.in_norm && p.residual_add && p.peer_push);
  EXPECT_EQ(plan_of(DType::Q8_0, 28672, 4096, 1, caps).swiglu, cuda_ops::SwigluKernel::kStreamQuant);
  // BF16: the stream pushes; its SwiGLU form runs the gate|up weight; no norm prologue there.
  p = plan_of(DType::BF16, 4096, 14336, 1, h200_caps());
  EXPECT_TRUE(p.peer_push);
  EXPECT_FALSE(p.in_norm || p.residual_add);
  EXPECT_EQ(plan_of(DType::BF16, 28672, 4096, 1, h200_caps()).swiglu, cuda_ops::SwigluKernel::kStreamHalf);
  // Two tokens: no epilogue on the tiled matvec; from 256 tokens the Hopper GEMM's SwiGLU.
  p = plan_of(DType::Q8_0, 28672, 4096, 2, caps);
  EXPECT_FALSE(p.in_norm || p.residual_add || p.peer_push);
  EXPECT_EQ(p.swiglu, cuda_ops::SwigluKernel::kNone);
  EXPECT_EQ(plan_of(DType::BF16, 28672, 4096, 512, h200_caps()).swiglu, cuda_ops::SwigluKernel::kGemmSm90);
  // A tuning choice that leaves the stream loses its epilogues with it.
  cuda_ops::MatmulCaps tiled = caps;
  tiled.tune.matvec = MatvecTune::kTiled;
  p = plan_of(DType::Q8_0, 28672, 4096, 1, tiled);
  EXPECT_FALSE(p.in_norm || p.residual_add || p.peer_push);
  EXPECT_EQ(p.swiglu, cuda_ops::SwigluKernel::kNone);
}

// A stacked weight of two types (a K-quant mix's q|k|v, plan.h): at one token the one stacked launch with the norm in
// its prologue, no other epilogue; at more tokens a GEMM over the stack's bf16 rows, never a matvec; stacked only
// where that launch takes the pair and width (stack_worth_it), and not under a matvec comparison of FERRY_CUDA_TUNE.
TEST(MatmulPlan, StackedQkvOfAKQuantMix) {  // host only
  using cuda_ops::MatmulKernel;
  const auto stacked = [](DType head, DType tail, int64_t head_rows, int64_t tail_rows, int64_t cols, int64_t n) {
    return cuda_ops::MatmulShape{.wtype = head, .rows = head_rows + tail_rows, .cols = cols, .n = n,
                                 .tail_rows = tail_rows, .tail_type = tail};
  };
  for (const DType head : {DType::Q4_K, DType::Q5_K}) {
    for (const bool copy : {false, true}) {
      const cuda_ops::MatmulCaps caps = h200_caps(copy);
      const cuda_ops::MatmulShape qkv = stacked(head, DType::Q6_K, 4096 + 1024, 1024, 4096, 1);  // Llama-3-8B
      EXPECT_TRUE(cuda_ops::stack_worth_it(qkv, caps)) << dtype_name(head);
      cuda_ops::MatmulPlan p = cuda_ops::plan_matmul(qkv, caps);
      EXPECT_EQ(p.kernel, MatmulKernel::kMatvec);
      EXPECT_EQ(p.matvec, cuda_ops::MatvecKernel::kStreamQuant);
      EXPECT_TRUE(p.in_norm);
      EXPECT_FALSE(p.residual_add);
      EXPECT_FALSE(p.peer_push);
      EXPECT_EQ(p.swiglu, cuda_ops::SwigluKernel::kNone);
      EXPECT_TRUE(cuda_ops::stack_worth_it(stacked(head, DType::Q6_K, 2048 + 512, 512, 2048, 1), caps));  // 1B
      for (const int64_t n : {2, 4, 8, 16, 32, 48, 512}) {
        p = cuda_ops::plan_matmul(stacked(head, DType::Q6_K, 5120, 1024, 4096, n), caps);
        EXPECT_NE(p.kernel, MatmulKernel::kMatvec) << n;
        EXPECT_FALSE(p.in_norm || p.residual_add || p.peer_push) << n;
      }
    }
  }
  const cuda_ops::MatmulCaps caps = h200_caps(false);
  EXPECT_FALSE(cuda_ops::stack_worth_it(stacked(DType::Q4_0, DType::Q6_K, 5120, 1024, 4096, 1), caps));  // no pair
  EXPECT_FALSE(cuda_ops::stack_worth_it(stacked(DType::Q6_K, DType::Q4_K, 5120, 1024, 4096, 1), caps));  // order
  EXPECT_FALSE(cuda_ops::stack_worth_it(stacked(DType::Q4_K, DType::Q6_K, 8192 + 1024, 1024, 8192, 1), caps));  // 70B
  EXPECT_FALSE(cuda_ops::stack_worth_it(stacked(DType::Q4_K, DType::Q6_K, 5120, 1024, 3072, 1), caps));  // Q6_K: 2048s
  EXPECT_FALSE(cuda_ops::stack_worth_it(stacked(DType::Q4_K, DType::Q6_K, 5120, 0, 4096, 1), caps));
  cuda_ops::MatmulCaps tiled = caps, invariant = caps;
  tiled.tune.matvec = MatvecTune::kTiled;
  invariant.batch_invariant = true;
  EXPECT_FALSE(cuda_ops::stack_worth_it(stacked(DType::Q4_K, DType::Q6_K, 5120, 1024, 4096, 1), tiled));
  EXPECT_FALSE(cuda_ops::stack_worth_it(stacked(DType::Q4_K, DType::Q6_K, 5120, 1024, 4096, 1), invariant));
  // The single-type plans are untouched by the new fields' defaults.
  EXPECT_EQ(plan_of(DType::Q4_K, 6144, 4096, 1, caps).matvec, cuda_ops::MatvecKernel::kStreamQuant);
  EXPECT_TRUE(plan_of(DType::Q4_K, 6144, 4096, 1, caps).residual_add);
}

TEST(MatmulPlan, KernelByTokenCount) {  // host only
  using cuda_ops::MatmulKernel;
  const auto k = [](int64_t n, int64_t rows, int64_t cols, cuda_ops::MatmulCaps caps = h200_caps()) {
    return plan_of(DType::BF16, rows, cols, n, caps).kernel;
  };
  EXPECT_EQ(k(1, 4096, 4096), MatmulKernel::kMatvec);
  EXPECT_EQ(k(4, 4096, 4096), MatmulKernel::kMatvec);
  EXPECT_EQ(k(8, 6144, 4096), MatmulKernel::kSkinnyMma);     // 1.14x cuBLASLt
  EXPECT_EQ(k(8, 28672, 4096), MatmulKernel::kCublas);       // rows past 8192
  EXPECT_EQ(plan_of(DType::Q4_0, 6144, 4096, 8, h200_caps(false)).kernel, MatmulKernel::kMatvec);  // no bf16 copy
  EXPECT_EQ(plan_of(DType::Q4_0, 4096, 4096, 32, h200_caps(false)).kernel, MatmulKernel::kSkinnyMma);  // dequantized
  for (const DType t : {DType::Q2_K, DType::Q3_K}) {  // as Q5_0/Q5_1: the tiled matvec, then dequantize + GEMM
    EXPECT_EQ(plan_of(t, 6144, 4096, 8, h200_caps(false)).kernel, MatmulKernel::kMatvec) << dtype_name(t);
    EXPECT_EQ(plan_of(t, 6144, 4096, 8, h200_caps(false)).matvec, cuda_ops::MatvecKernel::kTiled) << dtype_name(t);
    EXPECT_EQ(plan_of(t, 4096, 4096, 32, h200_caps(false)).kernel, MatmulKernel::kSkinnyMma) << dtype_name(t);
    EXPECT_EQ(plan_of(t, 4096, 4096, 100, h200_caps(false)).kernel, MatmulKernel::kCublas) << dtype_name(t);
    EXPECT_EQ(plan_of(t, 4096, 4096, 512, h200_caps(false)).kernel, MatmulKernel::kGemmSm90) << dtype_name(t);
  }
  // The wgmma skinny GEMM where it beat cuBLASLt (plan.h's table).
  EXPECT_EQ(k(32, 4096, 4096), MatmulKernel::kSkinnyMma);    // the mma.sync skinny GEMM keeps n <= 32
  EXPECT_EQ(k(33, 4096, 4096), MatmulKernel::kSkinnyWgmma);  // 1.04-1.09 at n = 32..48
  EXPECT_EQ(k(48, 3072, 4096), MatmulKernel::kSkinnyWgmma);  // TP=2 qkv: 1.07
  EXPECT_EQ(k(56, 4096, 4096), MatmulKernel::kSkinnyWgmma);  // wo: a win in situ (PDL chain)
  EXPECT_EQ(k(40, 4096, 2048), MatmulKernel::kCublas);       // TP=2 wo: 0.92
  EXPECT_EQ(k(64, 28672, 4096), MatmulKernel::kSkinnyWgmma);
  EXPECT_EQ(k(57, 128256, 4096), MatmulKernel::kSkinnyWgmma);
  EXPECT_EQ(k(64, 4096, 14336), MatmulKernel::kSkinnyWgmma);
  EXPECT_EQ(k(64, 576, 576), MatmulKernel::kCublas);         // small models' k
  EXPECT_EQ(k(65, 128256, 4096), MatmulKernel::kCublas);     // 0.96 at n = 96
  EXPECT_EQ(k(200, 4096, 14336), MatmulKernel::kCublas);
  EXPECT_EQ(k(256, 4096, 4096), MatmulKernel::kGemmSm90);
  cuda_ops::MatmulCaps no_wg = h200_caps();
  no_wg.skinny_wgmma = false;
  EXPECT_EQ(k(64, 28672, 4096, no_wg), MatmulKernel::kCublas);
  cuda_ops::MatmulCaps unaligned = h200_caps();
  unaligned.out_aligned = false;
  EXPECT_EQ(k(512, 4096, 4096, unaligned), MatmulKernel::kCublas);
  cuda_ops::MatmulCaps invariant = h200_caps();
  invariant.batch_invariant = true;
  EXPECT_EQ(k(1, 4096, 4096, invariant), MatmulKernel::kGemmSm90);
  EXPECT_EQ(k(64, 4096, 4096, invariant), MatmulKernel::kGemmSm90);
  // FERRY_CUDA_TUNE=skinny=... (n = 17..255 where the kernel fits; the rule elsewhere).
  cuda_ops::MatmulCaps wg = h200_caps(), mma = h200_caps();
  wg.tune.skinny = SkinnyTune::kWgmma;
  mma.tune.skinny = SkinnyTune::kMma;
  EXPECT_EQ(k(96, 6144, 4096, wg), MatmulKernel::kSkinnyWgmma);  // the rule: cuBLASLt
  EXPECT_EQ(k(64, 6144, 4096, mma), MatmulKernel::kSkinnyMma);
  EXPECT_EQ(k(16, 6144, 4096, wg), MatmulKernel::kSkinnyMma);    // n <= 16: the rule
  EXPECT_EQ(k(256, 6144, 4096, wg), MatmulKernel::kGemmSm90);
  EXPECT_EQ(k(96, 6144, 4096), MatmulKernel::kCublas);
}

TEST_F(CudaMatvec, EveryTypeEveryTokenCount) {
  for (const DType t : {DType::BF16, DType::F16, DType::F32, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                        DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                        DType::F8_E4M3_B128}) {
    for (int64_t n = 1; n <= 16; ++n) {
      const double err = run(t, n, 70, 768, n % 3 == 0, 1000 + uint32_t(n));
      EXPECT_LE(err, kTol) << dtype_name(t) << " n=" << n;
    }
  }
}

TEST_F(CudaMatvec, OddShapesAndTiles) {
  struct Shape {
    int64_t n_out, n_in;
  };
  // 33 rows: a partial warp; 2304 = 72 blocks; 16640 > one M=1 tile (16384 values); 4352 with n = 16: five
  // 1024-value tiles, the last one partial.
  for (const Shape s : {Shape{33, 2304}, Shape{1, 256}, Shape{257, 16640}, Shape{19, 4352}}) {
    for (const DType t : {DType::BF16, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q4_K,
                          DType::Q6_K, DType::Q2_K, DType::Q3_K, DType::F8_E4M3_B128}) {
      for (const int64_t n : {1, 5, 16}) {
        const double err = run(t, n, s.n_out, s.n_in, true, 7 + uint32_t(n));
        EXPECT_LE(err, kTol) << dtype_name(t) << " n=" << n << " " << s.n_out << "x" << s.n_in;
      }
    }
  }
  // Columns not a multiple of 32 (F32 / F16 / BF16 rows may be any multiple of 4 / 8).
  EXPECT_LE(run(DType::F32, 3, 9, 12, true, 5), kTol);
  EXPECT_LE(run(DType::BF16, 2, 9, 40, false, 6), kTol);
  EXPECT_LE(run(DType::F16, 16, 9, 1000, false, 8), kTol);
}

// kStreamHalf (one token; BF16/F16 with cols % 256 == 0 up to 16384 columns) where it applies: fewer rows than SMs, a row count one past a multiple of the SM count (blocks
// of unequal height), rows longer than a 16 KB stage (14336, 16384 columns), segment counts that do not divide
// among the 8 consumer warps (768 and 7168 columns: 3 and 28 segments), bias on and off; the row-by-row consumer
// where the stage-batched one has no instance (1024, 256, 768 columns), the stage-batched one elsewhere (263 rows
// of 4096 end on a 1-row last stage); and a call run twice is bit-identical (no atomics). run() also checks every
// other kernel on the same data.
TEST_F(CudaMatvec, StreamedShapes) {
  struct Shape {
    int64_t n_out, n_in;
  };
  for (const Shape s : {Shape{1, 256}, Shape{5, 2048}, Shape{133, 1024}, Shape{1000, 3072}, Shape{4103, 2048},
                        Shape{300, 14336}, Shape{64, 16384}, Shape{263, 4096}, Shape{131, 6144}, Shape{17, 7168},
                        Shape{9, 768}, Shape{700, 7168}, Shape{150, 10240}, Shape{90, 2816}, Shape{33, 1792},
                        Shape{1001, 2304}, Shape{134, 2560}}) {
    for (const DType t : {DType::BF16, DType::F16}) {
      ASSERT_TRUE(cuda_ops::stream_half_applies(t, 1, s.n_out, s.n_in)) << dtype_name(t) << " " << s.n_out << "x"
                                                                          << s.n_in;
      for (const bool bias : {false, true}) {
        const double err = run(t, 1, s.n_out, s.n_in, bias, 91 + uint32_t(s.n_out));
        EXPECT_LE(err, kTol) << dtype_name(t) << " " << s.n_out << "x" << s.n_in << " bias " << bias;
      }
    }
  }
  EXPECT_FALSE(cuda_ops::stream_half_applies(DType::BF16, 1, 64, 576));    // cols not a multiple of 256
  EXPECT_FALSE(cuda_ops::stream_half_applies(DType::BF16, 1, 64, 32768));  // x would not fit the registers
  EXPECT_FALSE(cuda_ops::stream_half_applies(DType::BF16, 2, 64, 4096));   // more than one token
  EXPECT_FALSE(cuda_ops::stream_half_applies(DType::Q4_0, 1, 64, 768));    // Q4_0: cols not a multiple of 512
  EXPECT_FALSE(cuda_ops::stream_half_applies(DType::Q8_0, 1, 64, 32768));  // x would not fit the registers
  EXPECT_FALSE(cuda_ops::stream_half_applies(DType::Q8_0, 2, 64, 4096));   // more than one token
  EXPECT_FALSE(cuda_ops::stream_half_applies(DType::Q4_1, 1, 64, 4096));   // not a streamed weight type
  EXPECT_FALSE(cuda_ops::stream_half_applies(DType::Q4_K, 1, 64, 4096));
  // The stage-batched consumer: half-precision weights whose (segments per warp, rows per stage) pair has an
  // instance: 1792 and 2048..16384 columns (7168: 28 segments, 4 on warps 0-3 and 3 on warps 4-7; 2304 and 2560:
  // 2 segments a warp, 3 rows a stage).
  for (const int64_t cols : {1792, 2048, 2304, 2560, 2816, 3072, 4096, 6144, 7168, 8192, 10240, 12288, 14336, 16384})
    EXPECT_TRUE(cuda_ops::stream_half_applies(DType::BF16, 1, 4103, cols, true)) << cols;
  EXPECT_FALSE(cuda_ops::stream_half_applies(DType::BF16, 1, 64, 1024, true));  // 8 rows a stage: no instance
  EXPECT_FALSE(cuda_ops::stream_half_applies(DType::Q8_0, 1, 64, 4096, true));
  // Deterministic: the same call twice gives the same bits.
  const int64_t rows = 2000, cols = 4096;
  const std::vector<float> f = random_floats(size_t(rows * cols), 5, 0.5f);
  const Tensor gx = upload(DType::F32, {1, cols}, random_floats(size_t(cols), 6));
  for (const DType t : {DType::BF16, DType::Q8_0, DType::Q4_0}) {
    std::vector<uint8_t> w(size_t(rows) * row_bytes(t, cols));
    for (int64_t r = 0; r < rows; ++r)
      quantize_row(t, f.data() + r * cols, w.data() + size_t(r) * row_bytes(t, cols), cols);
    const Tensor gw = gpu_->prepare_weight(Tensor::make(t, {rows, cols}, w.data()), keep_);
    const size_t scales = t == DType::BF16 ? 0 : cuda_ops::scales_offset(t, rows, cols);
    {
      const cuda_ops::MatvecKernel kernel =
          t == DType::BF16 ? cuda_ops::MatvecKernel::kStreamHalf : cuda_ops::MatvecKernel::kStreamQuant;
      std::vector<std::vector<float>> got;
      for (int i = 0; i < 2; ++i) {
        const Tensor o = poisoned({1, rows});
        gpu_->synchronize();
        cuda_ops::matvec(t, {.w = {static_cast<const uint8_t*>(gw.data), rows, cols, scales}, .x = gx.ptr<float>(),
                             .bias = nullptr, .out = o.ptr<float>(), .n_tokens = 1, .kernel = kernel},
                         nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        got.push_back(download(o));
      }
      EXPECT_EQ(got[0], got[1]) << dtype_name(t) << " " << cuda_ops::matvec_kernel_name(kernel);
    }
  }
}

// kStreamQuant (Q8_0/Q4_0/Q4_K/Q5_K/Q6_K, one token; stream_quant.cuh) where it applies: 512..16384 columns (1 to 4 segments a
// warp, 3 at 12288, uneven ones at 7168 and 14336), 1, 2, 4 and 8 rows a ring stage, and enough rows a block that
// the ring wraps several times with a short last stage (e.g. 20000 x 4096: 151-152 rows a block, Q4_0 19 stages
// of 8 rows through 6 slots). run() checks every kernel against the f32 reference (kTol) on the same data.
TEST_F(CudaMatvec, StreamQuantShapes) {
  struct Shape {
    int64_t n_out, n_in;
  };
  for (const Shape s : {Shape{20000, 4096}, Shape{3001, 14336}, Shape{1500, 7168}, Shape{2100, 2048},
                        Shape{700, 16384}, Shape{900, 12288}, Shape{37, 512}, Shape{6000, 6144}}) {
    for (const DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
      if (t == DType::Q6_K && s.n_in % 2048 != 0) continue;  // Q6_K: multiples of 2048 columns (stream_quant_plan.cuh)
      // Q5_K / Q6_K (their K-quant search makes the test's weights slowly): the shapes up to 16M weights; the large
      // ones below and in CudaMatvec.StreamQuantLlamaShapes.
      if ((t == DType::Q5_K || t == DType::Q6_K) && s.n_out * s.n_in > (int64_t(16) << 20)) continue;
      ASSERT_TRUE(cuda_ops::stream_quant_applies(t, 1, s.n_out, s.n_in)) << dtype_name(t) << " " << s.n_in;
      const double err = run(t, 1, s.n_out, s.n_in, s.n_out % 2 == 0, 17 + uint32_t(s.n_in));
      EXPECT_LE(err, kTol) << dtype_name(t) << " " << s.n_out << "x" << s.n_in;
    }
  }
  // The K-quants (stream_quant_kquant_math.cuh): odd rows (a short last stage in some blocks), activations far from 1
  // and outlier columns.
  for (const DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (const Shape s : {Shape{4103, 4096}, Shape{301, 14336}, Shape{133, 2048}}) {
      EXPECT_LE(run(t, 1, s.n_out, s.n_in, true, 23 + uint32_t(s.n_out)), kTol)
          << dtype_name(t) << " " << s.n_out << "x" << s.n_in;
    }
    EXPECT_LE(run(t, 1, 40, 2048, true, 90, 1e6f), kTol) << dtype_name(t);
    EXPECT_LE(run(t, 1, 40, 2048, false, 91, 1e-7f), kTol) << dtype_name(t);
    EXPECT_LE(run(t, 1, 40, 2048, false, 92, 1.0f, 1000.0f), kTol) << dtype_name(t);
  }
  // Deterministic: the same Q4_K call twice gives the same bits.
  {
    const int64_t rows = 2000, cols = 4096;
    const std::vector<float> f = random_floats(size_t(rows * cols), 5, 0.5f);
    std::vector<uint8_t> w(size_t(rows) * row_bytes(DType::Q4_K, cols));
    for (int64_t r = 0; r < rows; ++r)
      quantize_row(DType::Q4_K, f.data() + r * cols, w.data() + size_t(r) * row_bytes(DType::Q4_K, cols), cols);
    const Tensor gw = gpu_->prepare_weight(Tensor::make(DType::Q4_K, {rows, cols}, w.data()), keep_);
    const Tensor gx = upload(DType::F32, {1, cols}, random_floats(size_t(cols), 6));
    {
      std::vector<std::vector<float>> got;
      for (int i = 0; i < 2; ++i) {
        const Tensor o = poisoned({1, rows});
        gpu_->synchronize();
        cuda_ops::matvec(DType::Q4_K, {.w = {static_cast<const uint8_t*>(gw.data), rows, cols, 0},
                                       .x = gx.ptr<float>(), .bias = nullptr, .out = o.ptr<float>(), .n_tokens = 1,
                                       .kernel = cuda_ops::MatvecKernel::kStreamQuant},
                         nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        got.push_back(download(o));
      }
      EXPECT_EQ(got[0], got[1]) << "q4_K stream_quant";
    }
  }
  EXPECT_FALSE(cuda_ops::stream_quant_applies(DType::Q8_0, 1, 64, 768));    // not a multiple of 512
  EXPECT_FALSE(cuda_ops::stream_quant_applies(DType::Q4_0, 1, 64, 32768));  // past 16384 columns
  EXPECT_FALSE(cuda_ops::stream_quant_applies(DType::Q8_0, 2, 64, 4096));   // more than one token
  EXPECT_FALSE(cuda_ops::stream_quant_applies(DType::Q4_1, 1, 64, 4096));   // Q8_0, Q4_0 and the K-quants only
  EXPECT_FALSE(cuda_ops::stream_quant_applies(DType::Q6_K, 1, 64, 1536));   // Q6_K: multiples of 2048
  EXPECT_FALSE(cuda_ops::stream_quant_applies(DType::Q4_K, 1, 64, 768));    // Q4_K: 512-column segments too
  EXPECT_FALSE(cuda_ops::stream_quant_applies(DType::BF16, 1, 64, 4096));
}

// MatvecParams::stream (the producer keeps at most N stages in flight; its copies with an L2 evict_first policy)
// changes when stages are issued and which L2 lines go first, not what is computed: the same bits as no cap and no
// policy, for every N from 1 up to past the ring's stage count, with and without the policy, on shapes with one and
// four segments a warp and a short last stage; kStreamQuant (Q8_0/Q4_0 and the K-quants) and kStreamHalf (BF16).
TEST_F(CudaMatvec, WeightStreamSameBits) {
  struct Shape {
    int64_t n_out, n_in;
  };
  for (const Shape s : {Shape{6144, 4096}, Shape{4096, 14336}, Shape{1001, 4096}}) {
    for (const DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::BF16}) {
      const cuda_ops::MatvecKernel kernel =
          t == DType::BF16 ? cuda_ops::MatvecKernel::kStreamHalf : cuda_ops::MatvecKernel::kStreamQuant;
      const std::vector<float> f = random_floats(size_t(s.n_out * s.n_in), 70 + uint32_t(s.n_out), 0.5f);
      std::vector<uint8_t> w(size_t(s.n_out) * row_bytes(t, s.n_in));
      for (int64_t r = 0; r < s.n_out; ++r)
        quantize_row(t, f.data() + r * s.n_in, w.data() + size_t(r) * row_bytes(t, s.n_in), s.n_in);
      const Tensor gw = gpu_->prepare_weight(Tensor::make(t, {s.n_out, s.n_in}, w.data()), keep_);
      const Tensor gx = upload(DType::F32, {1, s.n_in}, random_floats(size_t(s.n_in), 71));
      const cuda_ops::WeightView view{static_cast<const uint8_t*>(gw.data), s.n_out, s.n_in,
                                      cuda_ops::is_split_type(t) ? cuda_ops::scales_offset(t, s.n_out, s.n_in) : 0};
      std::vector<float> base;
      for (const bool evict_first : {false, true}) {
        for (const int inflight : {0, 1, 2, 3, 5, 40}) {
          const Tensor o = poisoned({1, s.n_out});
          gpu_->synchronize();
          cuda_ops::matvec(t, {.w = view, .x = gx.ptr<float>(), .bias = nullptr, .out = o.ptr<float>(), .n_tokens = 1,
                               .kernel = kernel, .stream = {.ring_inflight = inflight, .evict_first = evict_first}},
                           nullptr);
          const std::string what = std::string(dtype_name(t)) + " " + std::to_string(s.n_out) + "x" +
                                   std::to_string(s.n_in) + " inflight " + std::to_string(inflight) +
                                   (evict_first ? " evict_first" : "");
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
          if (inflight == 0 && !evict_first) {
            base = download(o);
          } else {
            EXPECT_EQ(download(o), base) << what;
          }
        }
      }
    }
  }
}

// kStreamQuant on the Llama-3-8B projections (14336 x 4096 gate/up half, 4096 x 14336 down), every type it takes;
// run() also checks the other kernels on the same data.
TEST_F(CudaMatvec, StreamQuantLlamaShapes) {
  for (const DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
    EXPECT_LE(run(t, 1, 14336, 4096, false, 61), kTol) << dtype_name(t) << " 14336x4096";
    EXPECT_LE(run(t, 1, 4096, 14336, true, 62), kTol) << dtype_name(t) << " 4096x14336";
  }
  // Q4_K_M's down projection where it is Q6_K (kSegs 4, one row a stage).
  EXPECT_LE(run(DType::Q6_K, 1, 4096, 14336, true, 63), kTol) << "q6_K 4096x14336";
}

// Few rows and many columns (kTiled splits K among the warps of a block there), including a last slice
// shorter than the others and rows that end inside a row group.
TEST_F(CudaMatvec, FewRowsManyColumns) {
  struct Shape {
    int64_t n_out, n_in;
  };
  for (const Shape s : {Shape{40, 2048}, Shape{24, 4352}, Shape{17, 8192}, Shape{300, 14336}}) {
    for (const DType t : {DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K}) {
      for (const int64_t n : {1, 3, 16}) {
        const double err = run(t, n, s.n_out, s.n_in, n != 3, 31 + uint32_t(n));
        EXPECT_LE(err, kTol) << dtype_name(t) << " n=" << n << " " << s.n_out << "x" << s.n_in;
      }
    }
  }
}

// Activations far from 1 (|x| ~ 1e6, ~1e-7) or with outlier columns 1000x the rest: kTiled quantizes the
// activations per 32 values (two int8 levels) and must still come out right.
TEST_F(CudaMatvec, ActivationRange) {
  for (const DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
    for (const int64_t n : {1, 4}) {
      EXPECT_LE(run(t, n, 40, 2048, true, 90 + uint32_t(n), 1e6f), kTol);
      EXPECT_LE(run(t, n, 40, 2048, false, 91 + uint32_t(n), 1e-7f), kTol);
      EXPECT_LE(run(t, n, 40, 2048, false, 92 + uint32_t(n), 1.0f, 1000.0f), kTol);
    }
  }
}

// kTiled's activation quantization (matvec_tiled.cuh) redone on the host: per 32 values dx = max|x| / 127,
// q1 = rint(x / dx), q2 = clamp(rint(fma(-dx, q1, x) / (dx / 256)), +-127), x~ = dx / 256 (256 q1 + q2).
std::vector<float> tiled_quantized(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0.0f;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float dx = amax / 127.0f, dx2 = dx * (1.0f / 256.0f);
    for (size_t i = b; i < b + 32; ++i) {
      int q1 = 0, q2 = 0;
      if (amax > 0.0f) {
        q1 = std::clamp(int(std::nearbyint(x[i] / dx)), -127, 127);
        const float r = std::fma(-dx, float(q1), x[i]);
        q2 = std::clamp(int(std::nearbyint(r / dx2)), -127, 127);
      }
      out[i] = float(double(dx2) * double(256 * q1 + q2));
    }
  }
  return out;
}

// kTiled on the quantized types against the CPU reference fed the same quantized activations (tight: only
// the summation order differs) and against the f32 reference (the error the quantization adds, printed).
// Shapes: few rows (K split among warps: S > 1), 2000 rows (several row groups per block), K = 4096.
TEST_F(CudaMatvec, TiledMatchesQuantizedActivations) {
  struct Shape {
    int64_t n_out, n_in;
  };
  double worst_q = 0, worst_f = 0;
  for (const Shape s : {Shape{70, 768}, Shape{2000, 512}, Shape{300, 4096}}) {
    for (const DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K}) {
      for (const int64_t n : {1, 3, 16}) {
        const uint32_t seed = 500 + uint32_t(n) + uint32_t(s.n_out);
        const std::vector<float> f = random_floats(size_t(s.n_out * s.n_in), seed, 0.5f);
        std::vector<uint8_t> w(size_t(s.n_out) * row_bytes(t, s.n_in));
        for (int64_t r = 0; r < s.n_out; ++r)
          quantize_row(t, f.data() + r * s.n_in, w.data() + size_t(r) * row_bytes(t, s.n_in), s.n_in);
        std::vector<float> x = random_floats(size_t(n * s.n_in), seed + 1);
        for (size_t i = 0; i < x.size(); ++i) x[i] += 0.3f * float((i % size_t(s.n_in)) % 7) - 0.9f;
        std::vector<float> xq = tiled_quantized(x);
        const Tensor hw = Tensor::make(t, {s.n_out, s.n_in}, w.data());
        std::vector<float> ref(size_t(n * s.n_out)), ref_q(size_t(n * s.n_out));
        cpu_.matmul(host(DType::F32, {n, s.n_out}, ref), host(DType::F32, {n, s.n_in}, x), hw, Tensor{});
        cpu_.matmul(host(DType::F32, {n, s.n_out}, ref_q), host(DType::F32, {n, s.n_in}, xq), hw, Tensor{});
        const Tensor gw = gpu_->prepare_weight(hw, keep_);
        const Tensor gx = upload(DType::F32, {n, s.n_in}, x);
        const Tensor o = poisoned({n, s.n_out});
        const bool split = t != DType::Q4_K;
        const cuda_ops::WeightView view{static_cast<const uint8_t*>(gw.data), s.n_out, s.n_in,
                                        split ? cuda_ops::scales_offset(t, s.n_out, s.n_in) : 0};
        void* scr = scratch(t, cuda_ops::MatvecKernel::kTiled, n, s.n_in);
        gpu_->synchronize();
        cuda_ops::matvec(t, {.w = view, .x = gx.ptr<float>(), .bias = nullptr, .out = o.ptr<float>(),
                             .n_tokens = int(n), .kernel = cuda_ops::MatvecKernel::kTiled, .scratch = scr},
                         nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<float> got = download(o);
        const double eq = rel_l2(got, ref_q), ef = rel_l2(got, ref);
        EXPECT_LE(eq, 1e-5) << dtype_name(t) << " n=" << n << " " << s.n_out << "x" << s.n_in;
        EXPECT_LE(ef, kTol) << dtype_name(t) << " n=" << n << " " << s.n_out << "x" << s.n_in;
        worst_q = std::max(worst_q, eq);
        worst_f = std::max(worst_f, ef);
      }
    }
  }
  std::printf("tiled matvec, quantized types: worst relative L2 %.2e vs the same-quantization reference, %.2e vs f32\n",
              worst_q, worst_f);
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
