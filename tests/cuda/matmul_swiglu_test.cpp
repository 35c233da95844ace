// Backend::matmul_swiglu on CUDA: out (n, hidden) = silu(x . w_gate^T) * (x . w_up^T) with w_gate_up (2 hidden,
// dim) = rows of w_gate then rows of w_up. The fused kernels (matvec v9 with SwiGLU at n = 1, BF16/F16; the Hopper
// GEMM with a SwiGLU epilogue from 256 tokens) and the default (matmul + swiglu_fused) elsewhere, against:
//  - a float64 reference on the host (weights exact in bf16/f16; x as the path consumes it: f32 for the matvec,
//    rounded to bf16 for the GEMM), relative L2 <= 2e-5: the only error is fp32 summation over dim terms plus
//    the fp32 silu (a wrong pairing of gate and up rows, a wrong unit or a missed stage gives O(1));
//  - the unfused GPU path (matmul into gate_up, then swiglu_fused): the fused kernels do the same fp32 operations
//    in the same order per output (same matvec segments and shuffle tree; the same GEMM tile and k loop), so the
//    bits must match.
// Outputs are NaN-poisoned first. Shapes: Llama-3-8B (hidden 14336, dim 4096), its TP=2 shard (hidden 7168),
// hidden not a multiple of any tile or of the SM count (1000, 1234), dims taking every matvec instance (256,
// 1280, 2048, 3072, 4096, 6144, 8192), n = 1, 256, 300, 511, 512, and n = 3 / 64 (default path). Large shapes
// compare a sample of token rows with the float64 reference (every row with the unfused path). A bf16 output (the
// down projection's input where matmul_input_dtype is bf16) must be the f32 output rounded, bit for bit.
#ifdef FERRY_HAS_CUDA

#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "backends/cuda/matmul/gemm_sm90.cuh"
#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/matmul/stream_half.cuh"
#include "backends/cuda/matmul/stream_quant.cuh"
#include "cuda_test_util.h"
#include "formats/quant.h"

namespace ferry::test {
namespace {

double silu_mul_ref(double g, double u) { return g / (1.0 + std::exp(-g)) * u; }

class CudaMatmulSwiglu : public CudaOpsTest {
 protected:
  struct Case {
    int64_t n, hidden, dim;
    DType type = DType::BF16;
  };

  // Runs one case; `ref_rows` token rows (spread over n) are checked against float64 within tol, all rows
  // against the unfused path: the same bits, except at one token where the fused stream runs but the unfused
  // matmul is not version 9 (then within tol).
  void check(const Case& c, int64_t ref_rows, double tol, uint32_t seed) {
    const int64_t rows = 2 * c.hidden;
    const bool expect_bits = !(c.n == 1 && cuda_ops::stream_half_swiglu_applies(c.type, 1, rows, c.dim) &&
                               !cuda_ops::stream_half_applies(c.type, 1, rows, c.dim, true));
    const std::vector<float> wf = random_floats(size_t(rows * c.dim), seed, 1.0f / std::sqrt(float(c.dim)));
    std::vector<float> x = random_floats(size_t(c.n * c.dim), seed + 1);
    std::vector<uint16_t> wbits(wf.size());
    std::vector<double> wd(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) {
      wbits[i] = c.type == DType::BF16 ? f32_to_bf16(wf[i]) : f32_to_fp16(wf[i]);
      wd[i] = c.type == DType::BF16 ? bf16_to_f32(wbits[i]) : fp16_to_f32(wbits[i]);
    }
    const Tensor gw = gpu_->prepare_weight(Tensor::make(c.type, {rows, c.dim}, wbits.data()), keep_);
    const Tensor gx = upload(DType::F32, {c.n, c.dim}, x);
    const Tensor out = poisoned({c.n, c.hidden});
    const Tensor scratch = poisoned({c.n, 2 * c.hidden});
    gpu_->matmul_swiglu(out, scratch, gx, gw);
    const std::vector<float> got = download(out);

    // The unfused path on the same inputs.
    const Tensor out_ref = poisoned({c.n, c.hidden});
    const Tensor gate_up = poisoned({c.n, 2 * c.hidden});
    gpu_->matmul(gate_up, gx, gw, Tensor{});
    gpu_->swiglu_fused(out_ref, gate_up);
    const std::vector<float> unfused = download(out_ref);

    // Which path the backend takes decides what x the kernel saw (the GEMM paths round it to bf16).
    const bool gemm = c.n > 4;
    std::vector<float> sub_got, sub_ref;
    const int64_t step = ref_rows >= c.n ? 1 : c.n / ref_rows;
    for (int64_t t = 0; t < c.n; t += step) {
      for (int64_t j = 0; j < c.hidden; ++j) {
        double g = 0, u = 0;
        const double* wg = wd.data() + j * c.dim;
        const double* wu = wd.data() + (c.hidden + j) * c.dim;
        for (int64_t i = 0; i < c.dim; ++i) {
          const float xv = x[size_t(t * c.dim + i)];
          const double xi = gemm ? double(bf16_to_f32(f32_to_bf16(xv))) : double(xv);
          g += xi * wg[i];
          u += xi * wu[i];
        }
        sub_ref.push_back(float(silu_mul_ref(g, u)));
        sub_got.push_back(got[size_t(t * c.hidden + j)]);
      }
    }
    const std::string what = "n=" + std::to_string(c.n) + " hidden=" + std::to_string(c.hidden) +
                             " dim=" + std::to_string(c.dim) + (c.type == DType::BF16 ? " bf16" : " f16");
    const double err = rel_l2(sub_got, sub_ref);
    const double err_unfused = rel_l2(unfused, got);
    EXPECT_LE(err, tol) << what;
    if (expect_bits) {
      EXPECT_EQ(std::memcmp(got.data(), unfused.data(), got.size() * 4), 0) << what << ": bits differ from unfused"
                                                                            << " (rel L2 " << err_unfused << ")";
    } else {
      EXPECT_LE(err_unfused, tol) << what;
    }
    std::printf("  %-40s vs float64 %.2e, vs unfused %.2e\n", what.c_str(), err, err_unfused);
  }
};

// n = 1: version 9 with SwiGLU wherever it applies (BF16/F16, dim a multiple of 256 up to 8192).
TEST_F(CudaMatmulSwiglu, OneTokenStreamed) {
  if (hopper_sm_count() == 0) GTEST_SKIP() << "not a compute capability 9.x device";
  const Case cases[] = {
      {1, 14336, 4096},               // Llama-3-8B (kSegs 2, one unit a stage)
      {1, 7168, 4096},                // its TP=2 shard
      {1, 1000, 4096},                // units not a multiple of the SM count
      {1, 1234, 2048},                // kSegs 1, two units a stage, a short last stage
      {1, 777, 1280},                 // 5 segments: warps 5-7 idle for j = 0
      {1, 2000, 3072},                // 12 segments: warps 4-7 have one
      {1, 300, 6144},                 // kSegs 3
      {1, 4096, 8192},                // kSegs 4 (70B's dim)
      {1, 96, 256},                   // fewer units than SMs: one unit a block
      {1, 14336, 4096, DType::F16},
      {1, 1001, 2048, DType::F16},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) {
    EXPECT_TRUE(cuda_ops::stream_half_swiglu_applies(c.type, 1, 2 * c.hidden, c.dim));
    check(c, 1, 2e-5, seed += 7);
  }
}

// n = 1 on Q8_0 / Q4_0 / Q4_K / Q5_K / Q6_K: the streamed quantized matvec's SwiGLU form (stream_quant_swiglu). Against the CPU reference
// (dequantize, fp32 dot, then silu(g) * u) within 1e-4 relative L2 (the int8 activations' ~2e-5), and against the
// unfused GPU path (matmul on kStreamQuant, then swiglu_fused) bit for bit: each row's lane math, shuffle tree and
// warp order are the plain kernel's whatever rows share its stage.
TEST_F(CudaMatmulSwiglu, OneTokenQuantizedStreamed) {
  if (hopper_sm_count() == 0) GTEST_SKIP() << "not a compute capability 9.x device";
  const Case cases[] = {
      {1, 14336, 4096, DType::Q8_0},  // Llama-3-8B: 2 units a stage
      {1, 14336, 4096, DType::Q4_0},  // 4 units a stage
      {1, 14336, 4096, DType::Q4_K},
      {1, 14336, 4096, DType::Q5_K},
      {1, 14336, 4096, DType::Q6_K},
      {1, 1001, 2048, DType::Q6_K},   // a short last stage
      {1, 1234, 3072, DType::Q5_K},
      {1, 7168, 4096, DType::Q4_0},   // its TP=2 shard
      {1, 1001, 2048, DType::Q8_0},   // units not a multiple of the SM count, a short last stage
      {1, 1234, 3072, DType::Q4_K},   // 6 segments: warps 6-7 idle
      {1, 2000, 8192, DType::Q4_0},   // kSegs 2 (70B's dim)
      {1, 100, 512, DType::Q8_0},     // fewer units than SMs
  };
  uint32_t seed = 700;
  for (const Case& c : cases) {
    const std::string what = std::string(dtype_name(c.type)) + " hidden=" + std::to_string(c.hidden) +
                             " dim=" + std::to_string(c.dim);
    SCOPED_TRACE(what);
    const int64_t rows = 2 * c.hidden;
    ASSERT_TRUE(cuda_ops::stream_quant_swiglu_applies(c.type, 1, rows, c.dim));
    const std::vector<float> wf = random_floats(size_t(rows * c.dim), seed += 7, 1.0f / std::sqrt(float(c.dim)));
    std::vector<uint8_t> wbytes(size_t(rows) * row_bytes(c.type, c.dim));
    for (int64_t r = 0; r < rows; ++r)
      quantize_row(c.type, wf.data() + r * c.dim, wbytes.data() + size_t(r) * row_bytes(c.type, c.dim), c.dim);
    const Tensor hw = Tensor::make(c.type, {rows, c.dim}, wbytes.data());
    std::vector<float> x = random_floats(size_t(c.dim), seed + 1);
    std::vector<float> gu(static_cast<size_t>(rows)), ref(static_cast<size_t>(c.hidden));
    cpu_.matmul(host(DType::F32, {1, rows}, gu), host(DType::F32, {1, c.dim}, x), hw, Tensor{});
    for (int64_t j = 0; j < c.hidden; ++j) ref[size_t(j)] = float(silu_mul_ref(gu[size_t(j)], gu[size_t(c.hidden + j)]));

    const Tensor gw = gpu_->prepare_weight(hw, keep_);
    const Tensor gx = upload(DType::F32, {1, c.dim}, x);
    const Tensor out = poisoned({1, c.hidden});
    const Tensor gate_up = poisoned({1, rows});
    gpu_->matmul_swiglu(out, gate_up, gx, gw);
    const std::vector<float> got = download(out);
    const Tensor out_ref = poisoned({1, c.hidden});
    gpu_->matmul(gate_up, gx, gw, Tensor{});
    gpu_->swiglu_fused(out_ref, gate_up);
    const std::vector<float> unfused = download(out_ref);
    const double err = rel_l2(got, ref);
    EXPECT_LE(err, 1e-4);
    EXPECT_EQ(std::memcmp(got.data(), unfused.data(), got.size() * 4), 0)
        << "bits differ from matmul + swiglu_fused (rel L2 " << rel_l2(got, unfused) << ")";
    std::printf("  %-40s vs CPU reference %.2e\n", what.c_str(), err);
  }
}

// n >= 256: the Hopper GEMM with the SwiGLU epilogue (the heuristic's tile).
TEST_F(CudaMatmulSwiglu, PrefillGemm) {
  if (hopper_sm_count() == 0) GTEST_SKIP() << "not a compute capability 9.x device";
  const Case cases[] = {
      {512, 14336, 4096},  // Llama-3-8B prompt step
      {512, 7168, 4096},   // TP=2 shard
      {300, 1000, 512},    // hidden not a multiple of 64/96/128, n not of 128
      {511, 1234, 1024},
      {257, 130, 4096},    // one tile column, ragged
      {256, 3000, 520},    // k not a multiple of 64
  };
  uint32_t seed = 200;
  for (const Case& c : cases) check(c, c.hidden * c.dim > 4000000 ? 6 : c.n, 2e-5, seed += 7);
}

// Shapes the fused kernels do not take run the default (matmul + swiglu_fused): the same bits; within 1e-4 of
// float64 (matvec v5 at n = 3 splits bf16 activations hi + lo on tensor cores: matmul_test's matvec tolerance).
TEST_F(CudaMatmulSwiglu, DefaultPathElsewhere) {
  const Case cases[] = {
      {3, 1000, 512},       // matvec v5
      {64, 1000, 512},      // cuBLASLt / skinny
      {1, 500, 576},        // 576 columns: no streamed instance
      {512, 1001, 512},     // odd hidden: the GEMM's 8-byte stores need it even
  };
  uint32_t seed = 300;
  for (const Case& c : cases) check(c, c.n, 1e-4, seed += 7);
}

// A bf16 output (what the model asks for where matmul_input_dtype is bf16: the down projection's input) is the f32
// output rounded to nearest even, bit for bit, on every path: the Hopper GEMM's SwiGLU epilogue (n >= 256), the
// default matmul + swiglu_fused at decode sizes (the float4 kernel, and the scalar one at odd hidden), and
// swiglu_fused alone. The bf16 output is poisoned with NaN bits first (0xFFFF), with a guard past its end.
TEST_F(CudaMatmulSwiglu, Bf16OutputIsTheF32OutputRounded) {
  const Case cases[] = {
      {512, 1234, 1024},  // the Hopper GEMM where the device has one (hidden not a multiple of any tile)
      {300, 1000, 520},   // ragged n and k
      {64, 1000, 512},    // a decode step: matmul then swiglu_fused (float4)
      {48, 1001, 512},    // odd hidden: the scalar swiglu_fused
  };
  uint32_t seed = 400;
  for (const Case& c : cases) {
    const std::string what = "n=" + std::to_string(c.n) + " hidden=" + std::to_string(c.hidden);
    const std::vector<float> wf = random_floats(size_t(2 * c.hidden * c.dim), seed += 7, 1.0f / std::sqrt(float(c.dim)));
    const std::vector<float> x = random_floats(size_t(c.n * c.dim), seed + 1);
    const Tensor gw = gpu_->prepare_weight(Tensor::make(DType::BF16, {2 * c.hidden, c.dim}, to_bf16_bits(wf).data()), keep_);
    const Tensor gx = upload(DType::F32, {c.n, c.dim}, x);
    const Tensor out = poisoned({c.n, c.hidden});
    const Tensor scratch = poisoned({c.n, 2 * c.hidden});
    gpu_->matmul_swiglu(out, scratch, gx, gw);
    const std::vector<float> f32 = download(out);

    const size_t count = size_t(c.n * c.hidden), guard = 32;
    const std::vector<uint16_t> nan_bits(count + guard, 0xFFFF);
    const Tensor buf = upload(DType::BF16, {int64_t(count + guard)}, nan_bits);
    const Tensor out_bf16 = Tensor::make(DType::BF16, {c.n, c.hidden}, buf.data, Device::Cuda);
    const auto bf16_bits = [&] {
      std::vector<uint16_t> got(count + guard);
      gpu_->copy_to_host(got.data(), buf, got.size() * 2);
      return got;
    };
    gpu_->matmul_swiglu(out_bf16, scratch, gx, gw);
    std::vector<uint16_t> got = bf16_bits();
    size_t bad = 0, guard_bad = 0;
    for (size_t i = 0; i < count; ++i) bad += got[i] != f32_to_bf16(f32[i]);
    for (size_t i = count; i < got.size(); ++i) guard_bad += got[i] != 0xFFFF;
    EXPECT_EQ(bad, 0u) << what << ": matmul_swiglu's bf16 output differs from its f32 output rounded";
    EXPECT_EQ(guard_bad, 0u) << what << ": a write past the bf16 output";

    // swiglu_fused alone, from the f32 gate|up of the unfused matmul.
    const Tensor gate_up = poisoned({c.n, 2 * c.hidden});
    gpu_->matmul(gate_up, gx, gw, Tensor{});
    const Tensor ref = poisoned({c.n, c.hidden});
    gpu_->swiglu_fused(ref, gate_up);
    const std::vector<float> ref_f32 = download(ref);
    gpu_->copy_to_device(buf, nan_bits.data(), nan_bits.size() * 2);
    gpu_->swiglu_fused(out_bf16, gate_up);
    got = bf16_bits();
    bad = guard_bad = 0;
    for (size_t i = 0; i < count; ++i) bad += got[i] != f32_to_bf16(ref_f32[i]);
    for (size_t i = count; i < got.size(); ++i) guard_bad += got[i] != 0xFFFF;
    EXPECT_EQ(bad, 0u) << what << ": swiglu_fused's bf16 output differs from its f32 output rounded";
    EXPECT_EQ(guard_bad, 0u) << what << ": a write past swiglu_fused's bf16 output";
  }
}

// Every tile of the fused GEMM, forced, against run() with the same tile + silu on the host, and float64.
TEST_F(CudaMatmulSwiglu, GemmEveryTile) {
  if (hopper_sm_count() == 0) GTEST_SKIP() << "not a compute capability 9.x device";
  cuda_ops::Sm90Gemm gemm(0);
  if (!gemm.available()) GTEST_SKIP() << "no TMA encoder";
  const int64_t m = 300, hidden = 1000, k = 520;
  const std::vector<uint16_t> xb = to_bf16_bits(random_floats(size_t(m * k), 41));
  const std::vector<uint16_t> wb = to_bf16_bits(random_floats(size_t(2 * hidden * k), 42, 1.0f / std::sqrt(float(k))));
  const std::vector<float> gu = reference_gemm_bf16(xb, wb, m, 2 * hidden, k);
  std::vector<float> ref(size_t(m * hidden));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t j = 0; j < hidden; ++j)
      ref[size_t(t * hidden + j)] = float(silu_mul_ref(gu[size_t(t * 2 * hidden + j)], gu[size_t(t * 2 * hidden + hidden + j)]));
  uint16_t *dx = nullptr, *dw = nullptr;
  float *dout = nullptr, *dgu = nullptr;
  const size_t guard = 64;  // NaN floats past the output: a write past it fails
  ASSERT_CUDA_OK(cudaMalloc(&dx, xb.size() * 2));
  ASSERT_CUDA_OK(cudaMalloc(&dw, wb.size() * 2));
  ASSERT_CUDA_OK(cudaMalloc(&dout, (ref.size() + guard) * 4));
  ASSERT_CUDA_OK(cudaMalloc(&dgu, gu.size() * 4));
  ASSERT_CUDA_OK(cudaMemcpy(dx, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  ASSERT_CUDA_OK(cudaMemcpy(dw, wb.data(), wb.size() * 2, cudaMemcpyHostToDevice));
  for (const cuda_ops::GemmTile tile :
       {cuda_ops::GemmTile::k128x128, cuda_ops::GemmTile::k128x192, cuda_ops::GemmTile::k128x256}) {
    ASSERT_CUDA_OK(cudaMemset(dout, 0xFF, (ref.size() + guard) * 4));
    gemm.run_swiglu(dout, dx, dw, m, hidden, k, nullptr, &tile);
    gemm.run(dgu, dx, dw, m, 2 * hidden, k, nullptr, &tile);
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> got(ref.size() + guard), plain(gu.size());
    ASSERT_CUDA_OK(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost));
    ASSERT_CUDA_OK(cudaMemcpy(plain.data(), dgu, plain.size() * 4, cudaMemcpyDeviceToHost));
    bool guard_intact = true;
    for (size_t i = ref.size(); i < got.size(); ++i) guard_intact &= std::isnan(got[i]);
    EXPECT_TRUE(guard_intact) << "a write past the output";
    got.resize(ref.size());
    std::vector<float> host_silu(ref.size());
    for (int64_t t = 0; t < m; ++t)
      for (int64_t j = 0; j < hidden; ++j) {
        const float g = plain[size_t(t * 2 * hidden + j)], u = plain[size_t(t * 2 * hidden + hidden + j)];
        host_silu[size_t(t * hidden + j)] = g / (1.0f + std::exp(-g)) * u;
      }
    const double err = rel_l2(got, ref), err_run = rel_l2(got, host_silu);
    EXPECT_LE(err, 2e-5);
    EXPECT_LE(err_run, 1e-6);  // host and device expf may differ in the last ulp
    std::printf("  tile %d: vs float64 %.2e, vs run() + host silu %.2e\n", int(tile), err, err_run);
  }
  ASSERT_CUDA_OK(cudaFree(dx));
  ASSERT_CUDA_OK(cudaFree(dw));
  ASSERT_CUDA_OK(cudaFree(dout));
  ASSERT_CUDA_OK(cudaFree(dgu));
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
