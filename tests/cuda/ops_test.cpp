// CUDA element-wise, norm, rope, gather and embedding ops against the CPU reference backend.
// Tolerances: fp32 ops 1e-5 relative L2 (different summation order, same math); embedding 1e-6 (both
// sides dequantize exactly).
#ifdef FERRY_HAS_CUDA

#include <cmath>
#include <cstring>
#include <string>

#include "cuda_test_util.h"
#include "formats/quant.h"

namespace ferry::test {
namespace {

constexpr double kFp32Tol = 1e-5;

using CudaOps = CudaOpsTest;

TEST_F(CudaOps, RmsNormMatchesReference) {
  // The vector kernel (warp per row below 1024 columns, block per row up to 8192) and the scalar fallback
  // (cols % 4 != 0, or above 8192); 13 rows leave the last 8-row block of the warp shape partly empty.
  for (const int64_t cols : {64, 66, 128, 576, 1000, 4096, 5120, 8192, 8204}) {
    const int64_t rows = cols < 1024 ? 13 : 5;
    std::vector<float> x = random_floats(size_t(rows * cols), 1, 3.0f), w = random_floats(size_t(cols), 2);
    std::vector<float> ref(x.size());
    cpu_.rms_norm(host(DType::F32, {rows, cols}, ref), host(DType::F32, {rows, cols}, x), host(DType::F32, {cols}, w), 1e-5f);
    const Tensor gx = upload(DType::F32, {rows, cols}, x), gw = upload(DType::F32, {cols}, w);
    const Tensor out = poisoned({rows, cols});
    gpu_->rms_norm(out, gx, gw, 1e-5f);
    EXPECT_LE(rel_l2(download(out), ref), kFp32Tol) << "cols " << cols;
    gpu_->rms_norm(gx, gx, gw, 1e-5f);  // in place
    EXPECT_LE(rel_l2(download(gx), ref), kFp32Tol) << "in place, cols " << cols;
  }
}

TEST_F(CudaOps, AddRmsNormUpdatesResidualAndNormalizes) {
  for (const int64_t cols : {128, 3000, 4096, 8196}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const int64_t rows = 7;
    std::vector<float> res = random_floats(size_t(rows * cols), 3), delta = random_floats(res.size(), 4, 0.5f);
    std::vector<float> w = random_floats(size_t(cols), 5);
    const Tensor gres = upload(DType::F32, {rows, cols}, res), gdelta = upload(DType::F32, {rows, cols}, delta);
    const Tensor gw = upload(DType::F32, {cols}, w);
    std::vector<float> ref(res.size());
    cpu_.add_rms_norm(host(DType::F32, {rows, cols}, ref), host(DType::F32, {rows, cols}, res),
                      host(DType::F32, {rows, cols}, delta), host(DType::F32, {cols}, w), 1e-6f);
    const Tensor out = poisoned({rows, cols});
    gpu_->add_rms_norm(out, gres, gdelta, gw, 1e-6f);
    EXPECT_LE(rel_l2(download(out), ref), kFp32Tol);
    EXPECT_LE(rel_l2(download(gres), res), kFp32Tol);  // res now holds the CPU's updated residual
  }
}

// A norm that feeds a bf16 GEMM writes its rows rounded to bf16 (CudaBackend::matmul_input_dtype): the bits must
// be exactly the f32 output's, rounded to nearest even (what the separate conversion pass produced), for both
// kernel shapes (vector: cols % 4 == 0 up to 8192; scalar otherwise).
TEST_F(CudaOps, NormsWriteBf16RowsEqualToRoundedF32Rows) {
  for (const int64_t cols : {4096, 66, 8204}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const int64_t rows = 40;
    const std::vector<float> x = random_floats(size_t(rows * cols), 11, 2.0f), delta = random_floats(x.size(), 12, 0.5f);
    const std::vector<float> w = random_floats(size_t(cols), 13);
    const Tensor gx = upload(DType::F32, {rows, cols}, x), gw = upload(DType::F32, {cols}, w);
    const Tensor out = poisoned({rows, cols});
    const Tensor out16 = upload(DType::BF16, {rows, cols}, nullptr);
    std::vector<uint16_t> got(size_t(rows * cols));
    gpu_->rms_norm(out, gx, gw, 1e-5f);
    gpu_->rms_norm(out16, gx, gw, 1e-5f);
    gpu_->copy_to_host(got.data(), out16, got.size() * 2);
    EXPECT_EQ(got, to_bf16_bits(download(out))) << "rms_norm";
    const Tensor res_a = upload(DType::F32, {rows, cols}, x), res_b = upload(DType::F32, {rows, cols}, x);
    const Tensor gd = upload(DType::F32, {rows, cols}, delta);
    gpu_->add_rms_norm(out, res_a, gd, gw, 1e-6f);
    gpu_->add_rms_norm(out16, res_b, gd, gw, 1e-6f);
    gpu_->copy_to_host(got.data(), out16, got.size() * 2);
    EXPECT_EQ(got, to_bf16_bits(download(out))) << "add_rms_norm";
    EXPECT_EQ(download(res_a), download(res_b)) << "add_rms_norm residual";
  }
}

TEST_F(CudaOps, RopeBothOrderingsAndPartialRotation) {
  for (const RopeOrdering ord : {RopeOrdering::Interleaved, RopeOrdering::Neox}) {
    for (const int64_t head_dim : {64, 128}) {
      for (const int64_t half : {head_dim / 2, head_dim / 4}) {
        const int64_t n = 6, heads = 5;
        std::vector<float> x = random_floats(size_t(n * heads * head_dim), 6);
        std::vector<int32_t> pos = {0, 1, 17, 1000, 65535, 500000};
        std::vector<float> inv(static_cast<size_t>(half));
        for (int64_t i = 0; i < half; ++i) inv[size_t(i)] = float(std::pow(500000.0, -2.0 * double(i) / double(2 * half)));
        const Tensor gx = upload(DType::F32, {n, heads, head_dim}, x);
        const Tensor gpos = upload(DType::I32, {n}, pos), ginv = upload(DType::F32, {half}, inv);
        cpu_.rope(host(DType::F32, {n, heads, head_dim}, x), host(DType::I32, {n}, pos), host(DType::F32, {half}, inv), ord);
        gpu_->rope(gx, gpos, ginv, ord);
        EXPECT_LE(rel_l2(download(gx), x), kFp32Tol) << "head_dim " << head_dim << " half " << half;
      }
    }
  }
}

TEST_F(CudaOps, SwigluAlsoInPlace) {
  const int64_t n = 3, hidden = 14336;
  std::vector<float> g = random_floats(size_t(n * hidden), 7, 4.0f), u = random_floats(g.size(), 8);
  std::vector<float> ref(g.size());
  cpu_.swiglu(host(DType::F32, {n, hidden}, ref), host(DType::F32, {n, hidden}, g), host(DType::F32, {n, hidden}, u));
  const Tensor gg = upload(DType::F32, {n, hidden}, g), gu = upload(DType::F32, {n, hidden}, u);
  const Tensor out = poisoned({n, hidden});
  gpu_->swiglu(out, gg, gu);
  EXPECT_LE(rel_l2(download(out), ref), kFp32Tol);
  gpu_->swiglu(gg, gg, gu);
  EXPECT_LE(rel_l2(download(gg), ref), kFp32Tol);
}

TEST_F(CudaOps, GatherRows) {
  const int64_t rows = 10, cols = 576;
  std::vector<float> x = random_floats(size_t(rows * cols), 9);
  std::vector<int32_t> idx = {9, 0, 3, 3};
  std::vector<float> ref(idx.size() * size_t(cols));
  cpu_.gather_rows(host(DType::F32, {4, cols}, ref), host(DType::F32, {rows, cols}, x), host(DType::I32, {4}, idx));
  const Tensor out = poisoned({4, cols});
  gpu_->gather_rows(out, upload(DType::F32, {rows, cols}, x), upload(DType::I32, {4}, idx));
  EXPECT_EQ(rel_l2(download(out), ref), 0.0);
}

TEST_F(CudaOps, EmbeddingEveryTableType) {
  const int64_t vocab = 300, dim = 512;
  std::vector<int32_t> ids = {0, 299, 17, 17, 128, 5, 250};
  const int64_t n = int64_t(ids.size());
  for (const DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K,
                        DType::Q6_K, DType::Q5_0, DType::F8_E4M3_B128}) {
    std::vector<uint8_t> table = make_weight(t, vocab, dim, 10 + uint32_t(t));
    const Tensor ht = Tensor::make(t, {vocab, dim}, table.data());
    std::vector<float> ref(size_t(n * dim));
    cpu_.embedding(host(DType::F32, {n, dim}, ref), ht, host(DType::I32, {n}, ids));
    const Tensor gt = gpu_->prepare_weight(ht, keep_);
    const Tensor out = poisoned({n, dim});
    gpu_->embedding(out, gt, upload(DType::I32, {n}, ids));
    EXPECT_LE(rel_l2(download(out), ref), 1e-6) << dtype_name(t);
  }
}

// F8_E4M3_B128 rows hold every e4m3 code but the NaNs (normals, subnormals, both zeros) under f32 scales of
// several magnitudes: the GPU's decode (f16x2 conversion, then the f32 product) gives the CPU's values bit for bit.
TEST_F(CudaOps, Fp8EmbeddingIsExactForEveryCode) {
  const int64_t vocab = 8, dim = 512;  // 4 blocks a row
  std::vector<BlockF8E4M3B128> blocks(size_t(vocab * dim / kF8Block));
  for (size_t b = 0; b < blocks.size(); ++b) {
    for (int i = 0; i < kF8Block; ++i) {
      const int code = int((b * 131 + size_t(i) * 2 + b % 2) % 256);
      blocks[b].qs[i] = uint8_t((code & 0x7F) == 0x7F ? code - 1 : code);
    }
    blocks[b].d = std::ldexp(1.0f + 0.37f * float(b % 5), int(b % 9) * 6 - 30);
  }
  const Tensor ht = Tensor::make(DType::F8_E4M3_B128, {vocab, dim}, blocks.data());
  std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 6, 7, 3};
  const int64_t n = int64_t(ids.size());
  std::vector<float> ref(size_t(n * dim));
  cpu_.embedding(host(DType::F32, {n, dim}, ref), ht, host(DType::I32, {n}, ids));
  const Tensor gt = gpu_->prepare_weight(ht, keep_);
  const Tensor out = poisoned({n, dim});
  gpu_->embedding(out, gt, upload(DType::I32, {n}, ids));
  const std::vector<float> got = download(out);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &ref[i], 4);
    ASSERT_EQ(a, b) << "value " << i << ": " << got[i] << " vs " << ref[i];
  }
}

TEST_F(CudaOps, BadTokenIdIsAnErrorAtTheNextSync) {
  const int64_t vocab = 16, dim = 64;
  std::vector<uint8_t> table = make_weight(DType::F32, vocab, dim, 11);
  const Tensor gt = gpu_->prepare_weight(Tensor::make(DType::F32, {vocab, dim}, table.data()), keep_);
  std::vector<int32_t> ids = {3, 16};
  const Tensor out = poisoned({2, dim});
  gpu_->embedding(out, gt, upload(DType::I32, {2}, ids));
  try {
    download(out);
    FAIL() << "no error for token id 16 of 16";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 16"), std::string::npos) << e.what();
  }
  ids = {3, 4};  // the error was reported once; the backend works on
  gpu_->embedding(out, gt, upload(DType::I32, {2}, ids));
  EXPECT_NO_THROW(download(out));
}

TEST_F(CudaOps, OutOfMemorySaysWhatWasAskedAndWhatIsFree) {
  try {
    gpu_->alloc(size_t(1) << 50);
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("free"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(gpu_->alloc(1 << 20));  // and the device still works
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
