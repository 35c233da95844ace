// ferry's Hopper GEMM (gemm_sm90.cuh) against a float64 CPU reference on random bf16 inputs, every tile
// config, ragged m/n (not multiples of the tile) and a k tail (k not a multiple of 64: TMA zero-fills).
// Inputs are exactly representable in bf16 and the kernel accumulates in fp32, so the only error is fp32
// rounding over k terms: relative L2 <= 1e-5 (bf16-rounded inputs themselves would give ~3e-3, so a wrong
// fragment or swizzle cannot pass). Outputs are NaN-poisoned first: an unwritten element fails.
// Then CudaBackend::matmul for n > 16 with the bf16-copy-at-load option (Q4_0/Q8_0/F16) against the CPU
// backend (bf16 rounding of activations and weights: <= 1e-2, as in matmul_test.cpp).
// Stream-K plans (forced tile and share count, and the heuristic's own at the wo / qkv shapes): against float64 on
// ragged m, k tails and shares far narrower than a tile (each tile summed from many partials), bit-identical
// repeats (the sum's order must not depend on timing, and the flags must be reset for the next launch), and
// CudaBackend::matmul at ragged token counts on a 4096x4096 BF16 weight (rows sampled against float64).
// Skips without a device of compute capability 9.x.
#ifdef FERRY_HAS_CUDA

#include <cuda_runtime.h>

#include <string>

#include "backends/cuda/matmul/gemm_sm90.cuh"
#include "cuda_test_util.h"
#include "formats/quant.h"

namespace ferry::test {
namespace {



class Sm90GemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    gemm_ = std::make_unique<cuda_ops::Sm90Gemm>(0);
    if (!gemm_->available()) GTEST_SKIP() << "not a compute capability 9.x device";
  }

  // out (m, n) = x (m, k) . w (n, k)^T with the given tile (null: the heuristic's).
  void check(int64_t m, int64_t n, int64_t k, const cuda_ops::GemmTile* tile, uint32_t seed, int units = 0) {
    const std::vector<float> xf = random_floats(size_t(m * k), seed), wf = random_floats(size_t(n * k), seed + 1);
    std::vector<uint16_t> xb(xf.size()), wb(wf.size());
    for (size_t i = 0; i < xf.size(); ++i) xb[i] = f32_to_bf16(xf[i]);
    for (size_t i = 0; i < wf.size(); ++i) wb[i] = f32_to_bf16(wf[i]);
    std::vector<float> ref(size_t(m * n));
    std::vector<double> wd(wb.size());
    for (size_t i = 0; i < wb.size(); ++i) wd[i] = bf16_to_f32(wb[i]);
    std::vector<double> xr(static_cast<size_t>(k));
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t i = 0; i < k; ++i) xr[size_t(i)] = bf16_to_f32(xb[size_t(r * k + i)]);
      for (int64_t c = 0; c < n; ++c) {
        const double* wr = wd.data() + c * k;
        double s = 0;
        for (int64_t i = 0; i < k; ++i) s += xr[size_t(i)] * wr[i];
        ref[size_t(r * n + c)] = float(s);
      }
    }
    uint16_t *dx = nullptr, *dw = nullptr;
    float* dout = nullptr;
    ASSERT_CUDA_OK(cudaMalloc(&dx, xb.size() * 2));
    ASSERT_CUDA_OK(cudaMalloc(&dw, wb.size() * 2));
    ASSERT_CUDA_OK(cudaMalloc(&dout, ref.size() * 4));
    ASSERT_CUDA_OK(cudaMemcpy(dx, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
    ASSERT_CUDA_OK(cudaMemcpy(dw, wb.data(), wb.size() * 2, cudaMemcpyHostToDevice));
    ASSERT_CUDA_OK(cudaMemset(dout, 0xFF, ref.size() * 4));  // NaN
    gemm_->run(dout, dx, dw, m, n, k, nullptr, tile, units);
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> got(ref.size());
    ASSERT_CUDA_OK(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost));
    ASSERT_CUDA_OK(cudaFree(dx));
    ASSERT_CUDA_OK(cudaFree(dw));
    ASSERT_CUDA_OK(cudaFree(dout));
    const double err = rel_l2(got, ref);
    const std::string what = "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                             (tile == nullptr                             ? " auto"
                              : *tile == cuda_ops::GemmTile::k128x256 ? " 128x256"
                              : *tile == cuda_ops::GemmTile::k128x192 ? " 128x192"
                                                                      : " 128x128") +
                             (units > 0 ? " stream-K " + std::to_string(gemm_->plan(m, n, k, tile, units).grid) : "");
    EXPECT_LE(err, 1e-5) << what;
    std::printf("  %-36s rel L2 %.2e\n", what.c_str(), err);
  }

  std::unique_ptr<cuda_ops::Sm90Gemm> gemm_;
};

TEST_F(Sm90GemmTest, EveryTileOnRaggedShapes) {
  struct Shape {
    int64_t m, n, k;
  };
  // full tiles; ragged m; ragged n (not a multiple of 128 or 256); one k step; k tail; several tiles per
  // block (more tiles than SMs: the persistent loop and the ring's phase wrap across tiles); tiny m.
  const Shape shapes[] = {{256, 512, 512},  {200, 384, 256},  {129, 1000, 320},   {128, 256, 64},
                          {77, 264, 520},   {17, 130, 72},    {2000, 2304, 128},  {512, 256, 4096}};
  uint32_t seed = 10;
  for (const Shape& s : shapes) {
    for (const cuda_ops::GemmTile t :
         {cuda_ops::GemmTile::k128x128, cuda_ops::GemmTile::k128x192, cuda_ops::GemmTile::k128x256}) {
      check(s.m, s.n, s.k, &t, seed++);
    }
  }
  check(300, 768, 1024, nullptr, seed++);
}

// Stream-K with every tile: ragged m (511, 513, 777), k tails (1000, 520: the last k step is partly zeros), shares
// of a few k steps (each tile summed from up to ~16 partials), fewer blocks than tiles (whole tiles and cut ones in
// one block), one step per block.
TEST_F(Sm90GemmTest, StreamKOnRaggedShapes) {
  struct Case {
    int64_t m, n, k;
    cuda_ops::GemmTile tile;
    int units;
  };
  const Case cases[] = {{511, 512, 4096, cuda_ops::GemmTile::k128x256, 132},
                        {513, 512, 4096, cuda_ops::GemmTile::k128x128, 100},
                        {513, 768, 1000, cuda_ops::GemmTile::k128x192, 132},
                        {777, 384, 520, cuda_ops::GemmTile::k128x128, 8},
                        {777, 640, 2048, cuda_ops::GemmTile::k128x256, 61},
                        {200, 264, 72, cuda_ops::GemmTile::k128x256, 132},
                        {64, 1000, 4096, cuda_ops::GemmTile::k128x192, 5}};
  uint32_t seed = 40;
  for (const Case& c : cases) {
    const cuda_ops::GemmPlan p = gemm_->plan(c.m, c.n, c.k, &c.tile, c.units);
    ASSERT_TRUE(p.stream_k);
    ASSERT_LE(p.grid, gemm_->num_sms());
    check(c.m, c.n, c.k, &c.tile, seed++, c.units);
  }
}

// The heuristic's plan at the wo / qkv shapes (stream-K at 256 tokens on wo, whole tiles at ~512), and a forced
// stream-K plan there: 10 runs each give the
// same bits (NaN-poisoned output before each run), interleaved with another stream-K shape (flags left at zero by
// every launch), and agree with whole 128x128 tiles within fp32 rounding.
TEST_F(Sm90GemmTest, StreamKRepeatsBitIdentical) {
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{256, 4096, 4096}, {512, 4096, 4096}, {511, 6144, 4096}, {777, 4096, 4096}};
  const int64_t max_x = 777 * 4096, max_w = 6144 * 4096, max_out = 777 * 6144;
  const std::vector<uint16_t> xb = to_bf16_bits(random_floats(size_t(max_x), 91)),
                              wb = to_bf16_bits(random_floats(size_t(max_w), 92));
  uint16_t *dx = nullptr, *dw = nullptr;
  float *dout = nullptr, *dother = nullptr;
  ASSERT_CUDA_OK(cudaMalloc(&dx, xb.size() * 2));
  ASSERT_CUDA_OK(cudaMalloc(&dw, wb.size() * 2));
  ASSERT_CUDA_OK(cudaMalloc(&dout, size_t(max_out) * 4));
  ASSERT_CUDA_OK(cudaMalloc(&dother, size_t(max_out) * 4));
  ASSERT_CUDA_OK(cudaMemcpy(dx, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  ASSERT_CUDA_OK(cudaMemcpy(dw, wb.data(), wb.size() * 2, cudaMemcpyHostToDevice));
  const cuda_ops::GemmTile t256 = cuda_ops::GemmTile::k128x256, t128 = cuda_ops::GemmTile::k128x128;
  for (const Shape& s : shapes) {
    const size_t count = size_t(s.m * s.n);
    for (const bool forced : {false, true}) {
      const cuda_ops::GemmTile* tile = forced ? &t256 : nullptr;
      const int units = forced ? 97 : 0;
      std::vector<float> first(count), got(count);
      for (int rep = 0; rep < 10; ++rep) {
        ASSERT_CUDA_OK(cudaMemset(dout, 0xFF, count * 4));
        gemm_->run(dout, dx, dw, s.m, s.n, s.k, nullptr, tile, units);
        gemm_->run(dother, dx, dw, 300, 2048, 4096, nullptr, &t256, 132);  // another cut of the same workspace
        ASSERT_CUDA_OK(cudaDeviceSynchronize());
        ASSERT_CUDA_OK(cudaMemcpy(rep == 0 ? first.data() : got.data(), dout, count * 4, cudaMemcpyDeviceToHost));
        if (rep > 0) {
          ASSERT_EQ(std::memcmp(first.data(), got.data(), count * 4), 0) << "m=" << s.m << " n=" << s.n << " rep " << rep;
        }
      }
      gemm_->run(dout, dx, dw, s.m, s.n, s.k, nullptr, &t128);
      ASSERT_CUDA_OK(cudaDeviceSynchronize());
      ASSERT_CUDA_OK(cudaMemcpy(got.data(), dout, count * 4, cudaMemcpyDeviceToHost));
      const double err = rel_l2(first, got);
      EXPECT_LE(err, 1e-5) << "m=" << s.m << " n=" << s.n;
      const cuda_ops::GemmPlan p = gemm_->plan(s.m, s.n, s.k, tile, units);
      std::printf("  m=%ld n=%ld %s: plan %d%s grid %d, 10 repeats identical, vs 128x128 tiles rel L2 %.2e\n",
                  long(s.m), long(s.n), forced ? "forced" : "auto", p.block_n, p.stream_k ? " stream-K" : "", p.grid,
                  err);
    }
  }
  ASSERT_CUDA_OK(cudaFree(dx));
  ASSERT_CUDA_OK(cudaFree(dw));
  ASSERT_CUDA_OK(cudaFree(dout));
  ASSERT_CUDA_OK(cudaFree(dother));
}

TEST_F(Sm90GemmTest, RejectsUncoveredShapes) {
  EXPECT_TRUE(cuda_ops::Sm90Gemm::supports(17, 6144, 4096));
  EXPECT_FALSE(cuda_ops::Sm90Gemm::supports(17, 6144, 4100));  // k % 8
  EXPECT_FALSE(cuda_ops::Sm90Gemm::supports(17, 6145, 4096));  // n odd
  EXPECT_FALSE(cuda_ops::Sm90Gemm::supports(0, 64, 64));
}

// CudaBackend::matmul (n > 16: activation rounding + Hopper GEMM) with weights that keep a bf16 copy made
// at load, against the CPU backend's reference matmul.
class Sm90BackendMatmul : public CudaOpsTest {};

TEST_F(Sm90BackendMatmul, Bf16CopyAtLoad) {
  for (const bool copy : {false, true}) {
    CudaBackend gpu(CudaBackendOptions{.device_index = 0, .prefill_bf16_weights = copy});
    std::vector<DeviceBuffer> keep;
    for (const DType t : {DType::Q4_0, DType::Q8_0, DType::F16, DType::BF16, DType::Q4_K}) {
      const int64_t n = 150, n_out = 384, n_in = 512;
      const std::vector<float> f = random_floats(size_t(n_out * n_in), 7 + uint32_t(t), 0.5f);
      std::vector<uint8_t> wq(size_t(n_out) * row_bytes(t, n_in));
      for (int64_t r = 0; r < n_out; ++r) quantize_row(t, f.data() + r * n_in, wq.data() + size_t(r) * row_bytes(t, n_in), n_in);
      std::vector<float> x = random_floats(size_t(n * n_in), 8), ref(size_t(n * n_out)), got(ref.size());
      const Tensor hw = Tensor::make(t, {n_out, n_in}, wq.data());
      cpu_.matmul(host(DType::F32, {n, n_out}, ref), host(DType::F32, {n, n_in}, x), hw, Tensor{});
      const Tensor gw = gpu.prepare_weight(hw, keep);
      keep.push_back(gpu.alloc(x.size() * 4));
      const Tensor gx = Tensor::make(DType::F32, {n, n_in}, keep.back().data(), Device::Cuda);
      gpu.copy_to_device(gx, x.data(), x.size() * 4);
      keep.push_back(gpu.alloc(ref.size() * 4));
      const Tensor go = Tensor::make(DType::F32, {n, n_out}, keep.back().data(), Device::Cuda);
      const std::vector<float> nan(ref.size(), std::numeric_limits<float>::quiet_NaN());
      gpu.copy_to_device(go, nan.data(), nan.size() * 4);
      gpu.matmul(go, gx, gw, Tensor{});
      gpu.copy_to_host(got.data(), go, got.size() * 4);
      const double err = rel_l2(got, ref);
      EXPECT_LE(err, 1e-2) << dtype_name(t) << " copy=" << copy;
      std::printf("  %-6s bf16 copy %d: rel L2 %.2e\n", std::string(dtype_name(t)).c_str(), int(copy), err);
    }
  }
}

// CudaBackend::matmul at ragged token counts around 512 and at 256 on a 4096x4096 BF16 weight (the heuristic's plan:
// stream-K at 256, whole tiles elsewhere). Activations are bf16-representable, so the backend's conversion is exact; 24 sampled
// rows (the first, the last, the ragged tile's) against float64: fp32 rounding only.
TEST_F(Sm90BackendMatmul, StreamKShapesThroughTheBackend) {
  if (hopper_sm_count() == 0) GTEST_SKIP() << "not a compute capability 9.x device";
  CudaBackend gpu(CudaBackendOptions{.device_index = 0});
  const int64_t n_out = 4096, n_in = 4096;
  std::vector<uint16_t> wb = to_bf16_bits(random_floats(size_t(n_out * n_in), 61));
  std::vector<DeviceBuffer> keep;
  const Tensor gw = gpu.prepare_weight(Tensor::make(DType::BF16, {n_out, n_in}, wb.data()), keep);
  std::vector<double> wd(wb.size());
  for (size_t i = 0; i < wb.size(); ++i) wd[i] = bf16_to_f32(wb[i]);
  for (const int64_t n : {int64_t(511), int64_t(513), int64_t(777), int64_t(256)}) {
    std::vector<float> x = random_floats(size_t(n * n_in), 62 + uint32_t(n));
    for (float& v : x) v = bf16_to_f32(f32_to_bf16(v));
    keep.push_back(gpu.alloc(x.size() * 4));
    const Tensor gx = Tensor::make(DType::F32, {n, n_in}, keep.back().data(), Device::Cuda);
    gpu.copy_to_device(gx, x.data(), x.size() * 4);
    keep.push_back(gpu.alloc(size_t(n * n_out) * 4));
    const Tensor go = Tensor::make(DType::F32, {n, n_out}, keep.back().data(), Device::Cuda);
    const std::vector<float> nan(size_t(n * n_out), std::numeric_limits<float>::quiet_NaN());
    gpu.copy_to_device(go, nan.data(), nan.size() * 4);
    gpu.matmul(go, gx, gw, Tensor{});
    std::vector<float> all(nan.size());
    gpu.copy_to_host(all.data(), go, all.size() * 4);
    std::vector<float> got, ref;
    for (int i = 0; i < 24; ++i) {
      const int64_t tail0 = ((n - 1) / 128) * 128;  // the last row tile's first row
      const int64_t r = i < 8 ? i * (n / 8) : i < 16 ? n - 1 - (i - 8) : tail0 + (i - 16) % (n - tail0);
      for (int64_t c = 0; c < n_out; ++c) {
        double s = 0;
        for (int64_t j = 0; j < n_in; ++j) s += double(x[size_t(r * n_in + j)]) * wd[size_t(c * n_in + j)];
        ref.push_back(float(s));
        got.push_back(all[size_t(r * n_out + c)]);
      }
    }
    bool written = true;
    for (const float v : all) written &= !std::isnan(v);
    EXPECT_TRUE(written) << "n=" << n << ": an output left unwritten";
    const double err = rel_l2(got, ref);
    EXPECT_LE(err, 1e-5) << "n=" << n;
    std::printf("  backend matmul n=%ld 4096x4096 BF16: 24 rows rel L2 %.2e\n", long(n), err);
  }
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
