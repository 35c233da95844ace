// The decode matvec kernels (n <= 16 tokens) against the CPU reference (dot_ref: dequantize, fp32 dot) on
// random data, every native weight type, every token count 1..16 and odd shapes (rows not a multiple of a
// block's 16 rows, columns that leave the last unrolled chunks empty, K tiles that end mid-row).
// Each case runs through CudaBackend::matmul (the default kernel version) and through cuda_ops::matvec directly
// with every kept version (2, 5, 7, 9 and 10: matvec.cuh), so every selectable kernel stays tested.
// Tolerance: relative L2 <= 1e-4 for every type (version 2 keeps activations in fp32 and feeds the quantized
// values into the products exactly, matvec.cuh), far inside the 1e-3 allowed for quantized weights.
// Version 5 (the default) quantizes the activations for Q8_0/Q4_0/Q4_1/Q4_K into two int8 levels per 32 values
// (~2e-5 relative) and splits them into bf16 hi + lo for the BF16 tensor-core path: held to kTol against the
// f32 reference here, and, in Version5MatchesQuantizedActivations, to 1e-5 against the CPU reference fed the
// same quantized activations (only the summation order differs there).
#ifdef FERRY_HAS_CUDA

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <cuda_runtime.h>

#include "backends/cuda/matmul_dispatch.h"
#include "backends/cuda/matvec.cuh"
#include "backends/cuda/matvec_v10.cuh"
#include "backends/cuda/weight_layout.cuh"
#include "cuda_test_util.h"
#include "formats/quant.h"

namespace ferry::test {
namespace {

constexpr double kTol = 1e-4;
// Version 10's one-level activations (MatvecParams::one_level_acts; the backend's default at one Q8_0/Q4_0 token,
// off in these tests' backend: cuda_test_util.h):
// ~0.5% per value, more on rows whose sum cancels (the host emulation's worst case, 2 x 16384: 1.35e-2).
constexpr double kOneLevelTol = 3e-2;

class CudaMatvec : public CudaOpsTest {
 protected:
  // Returns the worst relative L2 of the backend's matvec path and every version (all held to kTol). x_scale
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
      // The backend's own dispatch (matmul_dispatch.h): bf16 weights with 5..16 tokens go to cuBLASLt, which
      // rounds the activations to bf16 (8-bit mantissa: ~2e-3 relative): the GEMM path's bound, 1e-2.
      const double err = rel_l2(download(out), ref);
      if (cuda_ops::choose_matmul_path(n, type == DType::BF16, false, false) == cuda_ops::MatmulPath::Matvec)
        worst = err;
      else
        EXPECT_LE(err, 1e-2) << dtype_name(type) << " backend (cuBLASLt) n=" << n;
    }
    // Every kept version directly (the prepared weight's layout: weight_layout.cuh).
    const bool split = type == DType::Q8_0 || type == DType::Q4_0 || type == DType::Q4_1;
    const cuda_ops::WeightView view{static_cast<const uint8_t*>(gw.data), n_out, n_in,
                                    split ? cuda_ops::scales_offset(type, n_out, n_in) : 0};
    for (const int version : {2, 5, 7, 9, 10}) {
      const Tensor o = poisoned({n, n_out});
      void* scratch = this->scratch(type, version, n, n_in);
      gpu_->synchronize();  // the backend's stream is done with the inputs and the poison before ours starts
      cuda_ops::matvec(type, {.w = view, .x = gx.ptr<float>(), .bias = bias ? gb.ptr<float>() : nullptr,
                              .out = o.ptr<float>(), .n_tokens = int(n), .version = version, .scratch = scratch},
                       nullptr);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const double err = rel_l2(download(o), ref);
      EXPECT_LE(err, kTol) << dtype_name(type) << " version " << version << " n=" << n << " " << n_out << "x" << n_in
                          << " x_scale " << x_scale << " outlier " << outlier;
      worst = std::max(worst, err);
    }
    // Version 10 with one-level activations, where it applies (Q8_0/Q4_0 at one token).
    if (n == 1 && (type == DType::Q8_0 || type == DType::Q4_0) && cuda_ops::matvec_v10_applies(type, 1, n_out, n_in)) {
      const Tensor o = poisoned({n, n_out});
      gpu_->synchronize();
      cuda_ops::matvec(type, {.w = view, .x = gx.ptr<float>(), .bias = bias ? gb.ptr<float>() : nullptr,
                              .out = o.ptr<float>(), .n_tokens = 1, .version = 10, .one_level_acts = true},
                       nullptr);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LE(rel_l2(download(o), ref), kOneLevelTol)
          << dtype_name(type) << " version 10 one level " << n_out << "x" << n_in << " x_scale " << x_scale;
    }
    return worst;
  }
  // Device scratch for (type, version, n, n_in), or null when the version needs none.
  void* scratch(DType type, int version, int64_t n, int64_t n_in) {
    const size_t bytes = cuda_ops::matvec_scratch_bytes(type, version, int(n), n_in);
    if (bytes == 0) return nullptr;
    keep_.push_back(gpu_->alloc(bytes));
    return keep_.back().data();
  }
};

// The dispatch rule (matmul_dispatch.h) on the Llama-3-8B decode shapes, host only (runs without a device): the
// measured winners stay where they won, and a forced version only replaces what it is asked to.
TEST(MatvecDispatch, RuleOnLlama3Shapes) {  // host only
  using cuda_ops::choose_matvec_version;
  const int def = cuda_ops::kMatvecDefaultVersion;
  // BF16 at one token: v9 wherever it applies; else v7 from 7168 columns where it applies, v2 from 16384 rows,
  // v5 otherwise.
  EXPECT_EQ(choose_matvec_version(true, true, 1, 4096, 14336, true, true, 0, def), 9);    // down
  EXPECT_EQ(choose_matvec_version(true, true, 1, 28672, 4096, true, true, 0, def), 9);    // fused gate/up
  EXPECT_EQ(choose_matvec_version(true, true, 1, 128256, 4096, true, true, 0, def), 9);   // lm head
  EXPECT_EQ(choose_matvec_version(true, true, 1, 6144, 4096, true, true, 0, def), 9);     // fused q|k|v
  EXPECT_EQ(choose_matvec_version(false, true, 1, 4096, 4096, true, true, 0, def), 9);    // F16 wo
  EXPECT_EQ(choose_matvec_version(true, true, 1, 4096, 14336, true, false, 0, def), 7);   // v9 does not apply
  EXPECT_EQ(choose_matvec_version(true, true, 1, 28672, 4096, true, false, 0, def), 2);
  EXPECT_EQ(choose_matvec_version(true, true, 1, 6144, 4096, true, false, 0, def), def);
  EXPECT_EQ(choose_matvec_version(true, true, 1, 4096, 14336, false, false, 0, def), def);  // neither applies
  EXPECT_EQ(choose_matvec_version(true, true, 2, 4096, 14336, false, false, 0, def), def);  // two tokens
  // Q8_0 and Q4_0 at one token: v10 wherever it applies (batched_applies = matvec_v10_applies; measured on
  // every Llama-3 shape and in tg128); v7 only when forced, even where it applies.
  EXPECT_EQ(choose_matvec_version(false, false, 1, 4096, 14336, true, true, 0, def), 10);   // down
  EXPECT_EQ(choose_matvec_version(false, false, 1, 28672, 4096, true, true, 0, def), 10);   // gate/up
  EXPECT_EQ(choose_matvec_version(false, false, 2, 4096, 14336, false, false, 0, def), def);  // two tokens
  EXPECT_EQ(choose_matvec_version(false, false, 1, 4096, 14336, true, true, 5, def), 5);    // forced 5
  EXPECT_EQ(choose_matvec_version(false, false, 1, 4096, 14336, true, false, 0, def), def);
  EXPECT_EQ(choose_matvec_version(false, false, 1, 4096, 14336, true, false, 7, def), 7);
  // Forced versions: 2 and 5 everywhere; 7 where it applies, else the rule; 9 always (matvec() falls back).
  EXPECT_EQ(choose_matvec_version(true, true, 1, 28672, 4096, true, true, 5, def), 5);
  EXPECT_EQ(choose_matvec_version(true, true, 1, 6144, 4096, true, true, 2, def), 2);
  EXPECT_EQ(choose_matvec_version(true, true, 1, 28672, 4096, true, true, 7, def), 7);
  EXPECT_EQ(choose_matvec_version(true, true, 1, 28672, 4096, false, false, 7, def), 2);
  EXPECT_EQ(choose_matvec_version(true, true, 1, 6144, 4096, true, false, 9, def), 9);
  // Forced 10: version 10 for Q8_0/Q4_0 where it applies (batched_applies), the rule elsewhere.
  EXPECT_EQ(choose_matvec_version(false, false, 1, 4096, 14336, true, true, 10, def), 10);
  EXPECT_EQ(choose_matvec_version(false, false, 1, 4096, 14336, true, false, 10, def), def);
  EXPECT_EQ(choose_matvec_version(false, false, 2, 4096, 14336, false, false, 10, def), def);
  EXPECT_EQ(choose_matvec_version(true, true, 1, 6144, 4096, true, true, 10, def), 9);    // BF16: the rule
  EXPECT_EQ(choose_matvec_version(true, true, 1, 4096, 14336, true, false, 10, def), 7);
}

// Which kernel a matmul of n tokens takes (choose_matmul_path), host only.
TEST(MatmulDispatch, PathByTokenCount) {  // host only
  using cuda_ops::choose_matmul_path;
  using cuda_ops::MatmulPath;
  EXPECT_EQ(choose_matmul_path(1, true, true, false, true, 4096), MatmulPath::Matvec);
  EXPECT_EQ(choose_matmul_path(4, true, true, false, true, 4096), MatmulPath::Matvec);
  EXPECT_EQ(choose_matmul_path(8, true, true, false, true, 6144), MatmulPath::Skinny);    // 1.14x cuBLASLt
  EXPECT_EQ(choose_matmul_path(8, true, true, false, true, 28672), MatmulPath::Cublas);   // rows past 8192
  EXPECT_EQ(choose_matmul_path(8, false, true, false, true, 6144), MatmulPath::Matvec);   // no bf16 copy at hand
  EXPECT_EQ(choose_matmul_path(32, false, true, false, true, 4096), MatmulPath::Skinny);  // dequantized per call
  EXPECT_EQ(choose_matmul_path(33, true, true, false, true, 4096), MatmulPath::Cublas);   // skinny loses from ~56
  EXPECT_EQ(choose_matmul_path(64, true, true, false, false, 4096), MatmulPath::Cublas);
  EXPECT_EQ(choose_matmul_path(256, true, true, false, false, 4096), MatmulPath::HopperGemm);
  EXPECT_EQ(choose_matmul_path(512, true, false, false, false, 4096), MatmulPath::Cublas);  // shape it does not take
  EXPECT_EQ(choose_matmul_path(1, true, true, true, true, 4096), MatmulPath::HopperGemm);   // batch-invariant
  // The wgmma skinny GEMM where it is available (wg_skinny_fits) and beat cuBLASLt (matmul_dispatch.h's table).
  const auto wg = [&](int64_t n, int64_t rows, int64_t cols) {
    return choose_matmul_path(n, true, true, false, n <= 128, rows, true, cols);  // skinny_fits: n <= 128 here
  };
  EXPECT_EQ(wg(32, 4096, 4096), MatmulPath::Skinny);          // the mma.sync skinny GEMM keeps n <= 32
  EXPECT_EQ(wg(33, 4096, 4096), MatmulPath::WgSkinny);        // 1.04-1.09 at n = 32..48
  EXPECT_EQ(wg(48, 3072, 4096), MatmulPath::WgSkinny);        // TP=2 qkv: 1.07
  EXPECT_EQ(wg(56, 4096, 4096), MatmulPath::WgSkinny);        // wo: 0.98 back to back, a win in situ (PDL chain)
  EXPECT_EQ(wg(40, 4096, 2048), MatmulPath::Cublas);          // TP=2 wo: 0.92
  EXPECT_EQ(wg(64, 6144, 4096), MatmulPath::WgSkinny);        // qkv: 0.97 back to back, a win in situ
  EXPECT_EQ(wg(64, 28672, 4096), MatmulPath::WgSkinny);       // 1.04
  EXPECT_EQ(wg(57, 128256, 4096), MatmulPath::WgSkinny);      // 1.07
  EXPECT_EQ(wg(64, 4096, 14336), MatmulPath::WgSkinny);       // 1.05
  EXPECT_EQ(wg(64, 14336, 4096), MatmulPath::WgSkinny);       // TP=2 gate/up: 1.02, a tie
  EXPECT_EQ(wg(64, 4096, 2048), MatmulPath::Cublas);          // k < 4096 (TP=2 wo: 0.87)
  EXPECT_EQ(wg(64, 576, 576), MatmulPath::Cublas);            // small models' k
  EXPECT_EQ(wg(65, 128256, 4096), MatmulPath::Cublas);        // 0.96 at n = 96
  EXPECT_EQ(wg(200, 4096, 14336), MatmulPath::Cublas);
  EXPECT_EQ(choose_matmul_path(64, true, true, false, false, 28672, false, 4096), MatmulPath::Cublas);  // not fit
  EXPECT_EQ(choose_matmul_path(64, true, true, true, false, 4096, true), MatmulPath::HopperGemm);  // batch-invariant
  // FERRY_CUDA_SKINNY overrides (n = 17..255 where the kernel fits; the rule elsewhere).
  using cuda_ops::SkinnyOverride;
  const auto forced = [&](int64_t n, bool skinny_fits, bool wg_fits, SkinnyOverride o) {
    return choose_matmul_path(n, true, true, false, skinny_fits, 6144, wg_fits, 4096, o);
  };
  EXPECT_EQ(forced(96, true, true, SkinnyOverride::Wg), MatmulPath::WgSkinny);   // the rule: cuBLASLt
  EXPECT_EQ(forced(64, true, true, SkinnyOverride::Mma), MatmulPath::Skinny);
  EXPECT_EQ(forced(64, true, false, SkinnyOverride::Wg), MatmulPath::Cublas);    // not supported: the rule
  EXPECT_EQ(forced(16, true, true, SkinnyOverride::Wg), MatmulPath::Skinny);     // n <= 16: the rule
  EXPECT_EQ(forced(256, true, true, SkinnyOverride::Wg), MatmulPath::HopperGemm);
  EXPECT_EQ(forced(64, true, true, SkinnyOverride::Rule), MatmulPath::WgSkinny);
  EXPECT_EQ(forced(96, true, true, SkinnyOverride::Rule), MatmulPath::Cublas);
}

TEST_F(CudaMatvec, EveryTypeEveryTokenCount) {
  for (const DType t : {DType::BF16, DType::F16, DType::F32, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K}) {
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
    for (const DType t : {DType::BF16, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K}) {
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

// Version 7 (streamed, one token; BF16/F16 and Q8_0 with cols % 256 == 0, Q4_0 with cols % 512 == 0, up to
// 16384 columns) where it applies: fewer rows than SMs, a row count one past a multiple of the SM count (blocks
// of unequal height), rows longer than a 16 KB stage (14336, 16384 columns), segment counts that do not divide
// among the 8 consumer warps (768 and 7168 columns: 3 and 28 half-precision / Q8_0 segments; Q4_0's 512-value
// segments: 3072 and 14336 columns, 6 and 28), bias on and off; and a call run twice is bit-identical (no
// atomics). run() also checks every other version on the same data, version 9 (stage-batched) included where its
// exact shapes apply (2048, 4096, 6144, 14336, 16384 columns; 263 rows of 4096 end on a 1-row last stage).
TEST_F(CudaMatvec, StreamedShapes) {
  struct Shape {
    int64_t n_out, n_in;
  };
  for (const Shape s : {Shape{1, 256}, Shape{5, 2048}, Shape{133, 1024}, Shape{1000, 3072}, Shape{4103, 2048},
                        Shape{300, 14336}, Shape{64, 16384}, Shape{263, 4096}, Shape{131, 6144}, Shape{17, 7168},
                        Shape{9, 768}, Shape{700, 7168}, Shape{150, 10240}, Shape{90, 2816}, Shape{33, 1792}}) {
    for (const DType t : {DType::BF16, DType::F16, DType::Q8_0, DType::Q4_0}) {
      if (t == DType::Q4_0 && s.n_in % 512 != 0) continue;
      ASSERT_TRUE(cuda_ops::matvec_stream_applies(t, 1, s.n_out, s.n_in)) << dtype_name(t) << " " << s.n_out << "x"
                                                                          << s.n_in;
      for (const bool bias : {false, true}) {
        const double err = run(t, 1, s.n_out, s.n_in, bias, 91 + uint32_t(s.n_out));
        EXPECT_LE(err, kTol) << dtype_name(t) << " " << s.n_out << "x" << s.n_in << " bias " << bias;
      }
    }
  }
  EXPECT_FALSE(cuda_ops::matvec_stream_applies(DType::BF16, 1, 64, 576));    // cols not a multiple of 256
  EXPECT_FALSE(cuda_ops::matvec_stream_applies(DType::BF16, 1, 64, 32768));  // x would not fit the registers
  EXPECT_FALSE(cuda_ops::matvec_stream_applies(DType::BF16, 2, 64, 4096));   // more than one token
  EXPECT_FALSE(cuda_ops::matvec_stream_applies(DType::Q4_0, 1, 64, 768));    // Q4_0: cols not a multiple of 512
  EXPECT_FALSE(cuda_ops::matvec_stream_applies(DType::Q8_0, 1, 64, 32768));  // x would not fit the registers
  EXPECT_FALSE(cuda_ops::matvec_stream_applies(DType::Q8_0, 2, 64, 4096));   // more than one token
  EXPECT_FALSE(cuda_ops::matvec_stream_applies(DType::Q4_1, 1, 64, 4096));   // not a streamed weight type
  EXPECT_FALSE(cuda_ops::matvec_stream_applies(DType::Q4_K, 1, 64, 4096));
  // Version 9 (stage-batched): half-precision weights whose (segments per warp, rows per stage) pair has an
  // instance: 1792, 2048 and 2816..16384 columns (7168: 28 segments, 4 on warps 0-3 and 3 on warps 4-7).
  for (const int64_t cols : {1792, 2048, 2816, 3072, 4096, 6144, 7168, 8192, 10240, 12288, 14336, 16384})
    EXPECT_TRUE(cuda_ops::matvec_stream_applies(DType::BF16, 1, 4103, cols, true)) << cols;
  EXPECT_FALSE(cuda_ops::matvec_stream_applies(DType::BF16, 1, 64, 2560, true));  // 3 rows a stage: no instance
  EXPECT_FALSE(cuda_ops::matvec_stream_applies(DType::BF16, 1, 64, 1024, true));  // 8 rows a stage: no instance
  EXPECT_FALSE(cuda_ops::matvec_stream_applies(DType::Q8_0, 1, 64, 4096, true));
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
    for (const int version : {7, 10}) {  // 10: Q8_0/Q4_0 only
      if (version >= 10 && t == DType::BF16) continue;
      std::vector<std::vector<float>> got;
      for (int i = 0; i < 2; ++i) {
        const Tensor o = poisoned({1, rows});
        gpu_->synchronize();
        cuda_ops::matvec(t, {.w = {static_cast<const uint8_t*>(gw.data), rows, cols, scales}, .x = gx.ptr<float>(),
                             .bias = nullptr, .out = o.ptr<float>(), .n_tokens = 1, .version = version},
                         nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        got.push_back(download(o));
      }
      EXPECT_EQ(got[0], got[1]) << dtype_name(t) << " version " << version;
    }
  }
}

// Version 10 (Q8_0/Q4_0/Q4_K, one token; matvec_v10.cuh) where it applies: 512..16384 columns (1 to 4 segments a
// warp, 3 at 12288, uneven ones at 7168 and 14336), 1, 2, 4 and 8 rows a ring stage, and enough rows a block that
// the ring wraps several times with a short last stage (e.g. 20000 x 4096: 151-152 rows a block, Q4_0 19 stages
// of 8 rows through 6 slots). run() checks every version against the f32 reference (kTol) on the same data.
TEST_F(CudaMatvec, Version10Shapes) {
  struct Shape {
    int64_t n_out, n_in;
  };
  for (const Shape s : {Shape{20000, 4096}, Shape{3001, 14336}, Shape{1500, 7168}, Shape{2100, 2048},
                        Shape{700, 16384}, Shape{900, 12288}, Shape{37, 512}, Shape{6000, 6144}}) {
    for (const DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
      ASSERT_TRUE(cuda_ops::matvec_v10_applies(t, 1, s.n_out, s.n_in)) << dtype_name(t) << " " << s.n_in;
      const double err = run(t, 1, s.n_out, s.n_in, s.n_out % 2 == 0, 17 + uint32_t(s.n_in));
      EXPECT_LE(err, kTol) << dtype_name(t) << " " << s.n_out << "x" << s.n_in;
    }
  }
  // Q4_K (GGUF super-blocks streamed as stored, matvec_v10_math.cuh): odd rows (a short last stage in some
  // blocks), activations far from 1 and outlier columns.
  for (const Shape s : {Shape{4103, 4096}, Shape{301, 14336}, Shape{133, 1024}}) {
    EXPECT_LE(run(DType::Q4_K, 1, s.n_out, s.n_in, true, 23 + uint32_t(s.n_out)), kTol) << s.n_out << "x" << s.n_in;
  }
  EXPECT_LE(run(DType::Q4_K, 1, 40, 2048, true, 90, 1e6f), kTol);
  EXPECT_LE(run(DType::Q4_K, 1, 40, 2048, false, 91, 1e-7f), kTol);
  EXPECT_LE(run(DType::Q4_K, 1, 40, 2048, false, 92, 1.0f, 1000.0f), kTol);
  // Deterministic: the same Q4_K call twice gives the same bits.
  {
    const int64_t rows = 2000, cols = 4096;
    const std::vector<float> f = random_floats(size_t(rows * cols), 5, 0.5f);
    std::vector<uint8_t> w(size_t(rows) * row_bytes(DType::Q4_K, cols));
    for (int64_t r = 0; r < rows; ++r)
      quantize_row(DType::Q4_K, f.data() + r * cols, w.data() + size_t(r) * row_bytes(DType::Q4_K, cols), cols);
    const Tensor gw = gpu_->prepare_weight(Tensor::make(DType::Q4_K, {rows, cols}, w.data()), keep_);
    const Tensor gx = upload(DType::F32, {1, cols}, random_floats(size_t(cols), 6));
    for (const int version : {10}) {
      std::vector<std::vector<float>> got;
      for (int i = 0; i < 2; ++i) {
        const Tensor o = poisoned({1, rows});
        gpu_->synchronize();
        cuda_ops::matvec(DType::Q4_K, {.w = {static_cast<const uint8_t*>(gw.data), rows, cols, 0},
                                       .x = gx.ptr<float>(), .bias = nullptr, .out = o.ptr<float>(), .n_tokens = 1,
                                       .version = version},
                         nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        got.push_back(download(o));
      }
      EXPECT_EQ(got[0], got[1]) << "q4_K version " << version;
    }
  }
  EXPECT_FALSE(cuda_ops::matvec_v10_applies(DType::Q8_0, 1, 64, 768));    // not a multiple of 512
  EXPECT_FALSE(cuda_ops::matvec_v10_applies(DType::Q4_0, 1, 64, 32768));  // past 16384 columns
  EXPECT_FALSE(cuda_ops::matvec_v10_applies(DType::Q8_0, 2, 64, 4096));   // more than one token
  EXPECT_FALSE(cuda_ops::matvec_v10_applies(DType::Q4_1, 1, 64, 4096));   // Q8_0, Q4_0 and Q4_K only
  EXPECT_FALSE(cuda_ops::matvec_v10_applies(DType::Q4_K, 1, 64, 768));    // Q4_K: 512-column segments too
  EXPECT_FALSE(cuda_ops::matvec_v10_applies(DType::BF16, 1, 64, 4096));
}

// MatvecParams::stream (the producer keeps at most N stages in flight; its copies with an L2 evict_first policy)
// changes when stages are issued and which L2 lines go first, not what is computed: the same bits as no cap and no
// policy, for every N from 1 up to past the ring's stage count, with and without the policy, on shapes with one and
// four segments a warp and a short last stage; version 10 (Q8_0/Q4_0/Q4_K) and version 9 (BF16).
TEST_F(CudaMatvec, Version10WeightStreamSameBits) {
  struct Shape {
    int64_t n_out, n_in;
  };
  for (const Shape s : {Shape{6144, 4096}, Shape{4096, 14336}, Shape{1001, 4096}}) {
    for (const DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::BF16}) {
      const int version = t == DType::BF16 ? 9 : 10;
      const std::vector<float> f = random_floats(size_t(s.n_out * s.n_in), 70 + uint32_t(s.n_out), 0.5f);
      std::vector<uint8_t> w(size_t(s.n_out) * row_bytes(t, s.n_in));
      for (int64_t r = 0; r < s.n_out; ++r)
        quantize_row(t, f.data() + r * s.n_in, w.data() + size_t(r) * row_bytes(t, s.n_in), s.n_in);
      const Tensor gw = gpu_->prepare_weight(Tensor::make(t, {s.n_out, s.n_in}, w.data()), keep_);
      const Tensor gx = upload(DType::F32, {1, s.n_in}, random_floats(size_t(s.n_in), 71));
      const cuda_ops::WeightView view{static_cast<const uint8_t*>(gw.data), s.n_out, s.n_in,
                                      t == DType::Q4_K || t == DType::BF16 ? 0 : cuda_ops::scales_offset(t, s.n_out, s.n_in)};
      std::vector<float> base;
      for (const bool evict_first : {false, true}) {
        for (const int inflight : {0, 1, 2, 3, 5, 40}) {
          const Tensor o = poisoned({1, s.n_out});
          gpu_->synchronize();
          cuda_ops::matvec(t, {.w = view, .x = gx.ptr<float>(), .bias = nullptr, .out = o.ptr<float>(), .n_tokens = 1,
                               .version = version, .stream = {.ring_inflight = inflight, .evict_first = evict_first}},
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

// Version 10 on the Llama-3-8B projections issue 3 names (14336 x 4096 gate/up half, 4096 x 14336 down), every
// type it takes; run() also checks versions 2/5/7/9 on the same data.
TEST_F(CudaMatvec, Version10LlamaShapes) {
  for (const DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
    EXPECT_LE(run(t, 1, 14336, 4096, false, 61), kTol) << dtype_name(t) << " 14336x4096";
    EXPECT_LE(run(t, 1, 4096, 14336, true, 62), kTol) << dtype_name(t) << " 4096x14336";
  }
}

// Few rows and many columns (version 5 splits K among the warps of a block there), including a last slice
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

// Activations far from 1 (|x| ~ 1e6, ~1e-7) or with outlier columns 1000x the rest: version 5 quantizes the
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

// Version 5's activation quantization (matvec_v5.cuh) redone on the host: per 32 values dx = max|x| / 127,
// q1 = rint(x / dx), q2 = clamp(rint(fma(-dx, q1, x) / (dx / 256)), +-127), x~ = dx / 256 (256 q1 + q2).
std::vector<float> v5_quantized(const std::vector<float>& x) {
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

// Version 5 on the quantized types against the CPU reference fed the same quantized activations (tight: only
// the summation order differs) and against the f32 reference (the error the quantization adds, printed).
// Shapes: few rows (K split among warps: S > 1), 2000 rows (several row groups per block), K = 4096.
TEST_F(CudaMatvec, Version5MatchesQuantizedActivations) {
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
        std::vector<float> xq = v5_quantized(x);
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
        void* scr = scratch(t, 5, n, s.n_in);
        gpu_->synchronize();
        cuda_ops::matvec(t, {.w = view, .x = gx.ptr<float>(), .bias = nullptr, .out = o.ptr<float>(),
                             .n_tokens = int(n), .version = 5, .scratch = scr},
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
  std::printf("version 5 quantized types: worst relative L2 %.2e vs the same-quantization reference, %.2e vs f32\n",
              worst_q, worst_f);
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
