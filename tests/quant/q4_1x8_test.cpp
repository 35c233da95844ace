// The repacked Q4_1 / Q4_0 layout (backends/cpu/q4_1x8.h) and CpuBackend's use of it: rows read back from the
// repacked form equal the original rows' dequantization bit for bit; a prepared (repacked) weight gives
// the same matmul results as the row-major kernels within float reordering, on every shape remainder
// (n_out not a multiple of 8, token counts not a multiple of 4, odd block counts); the embedding of a
// repacked table equals the original's. Batch invariance of the repacked path: batch_invariance_test.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/q4_1x8.h"
#include "fixtures/numeric.h"
#include "core/fp16.h"
#include "formats/quant.h"

namespace ferry {
namespace {

std::vector<uint8_t> random_q4(DType t, int64_t n_out, int64_t n_in, uint32_t seed) {
  const auto f = test::random_floats(size_t(n_out * n_in), seed, 0.05f);
  const size_t rb = row_bytes(t, n_in);
  std::vector<uint8_t> w(rb * size_t(n_out));  // (n_out, rb) bytes
  for (int64_t r = 0; r < n_out; ++r) quantize_row(t, f.data() + r * n_in, w.data() + size_t(r) * rb, n_in);
  return w;
}

constexpr DType kTypes[] = {DType::Q4_1, DType::Q4_0};

TEST(Q4_1x8, RepackedRowsDequantizeBitIdentically) {
  for (DType t : kTypes) {
    for (const auto& [n_out, n_in] : {std::pair<int64_t, int64_t>{8, 32}, {37, 17 * 32}, {61, 3 * 32}}) {
      const auto w = random_q4(t, n_out, n_in, uint32_t(n_out));
      std::vector<uint8_t> packed(q4_1x8_bytes(n_out, n_in));
      ASSERT_EQ(packed.size(), size_t((n_out + 7) / 8 * 8) * row_bytes(DType::Q4_1, n_in));
      ASSERT_TRUE(repack_q4_1x8(t, w.data(), n_out, n_in, reinterpret_cast<BlockQ4_1x8*>(packed.data())));
      std::vector<float> want(static_cast<size_t>(n_in)), got(static_cast<size_t>(n_in));
      for (int64_t r = 0; r < n_out; ++r) {
        dequantize_row(t, w.data() + size_t(r) * row_bytes(t, n_in), want.data(), n_in);
        dequantize_q4_1x8_row(t, reinterpret_cast<const BlockQ4_1x8*>(packed.data()), n_in, r, got.data());
        ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0)
            << dtype_name(t) << " row " << r << " of " << n_out;
      }
    }
  }
}

TEST(Q4_1x8, Q4_0ScaleTooLargeForMinusEightDIsNotRepacked) {
  std::vector<uint8_t> w = random_q4(DType::Q4_0, 8, 32, 1u);
  const uint16_t big = f32_to_fp16(9000.0f);  // -8 d = -72000 overflows fp16
  std::memcpy(w.data(), &big, 2);
  std::vector<BlockQ4_1x8> packed(1);
  EXPECT_FALSE(repack_q4_1x8(DType::Q4_0, w.data(), 8, 32, packed.data()));
}

TEST(Q4_1x8, PreparedMatmulMatchesRowMajorKernels) {
  if (!cpu_supports(SimdLevel::Avx512) || !q4_1x8_supported()) GTEST_SKIP() << "no AVX-512 VNNI";
  CpuBackend fast({.kernels = CpuKernels::Fast, .n_threads = 2, .simd = SimdLevel::Avx512});
  for (DType t : kTypes)
  for (const auto& [n_out, n_in] : {std::pair<int64_t, int64_t>{37, 17 * 32}, {192, 576}, {576, 1536}}) {
    const auto w = random_q4(t, n_out, n_in, 3u + uint32_t(n_in));
    const Tensor host = Tensor::make(t, {n_out, n_in}, const_cast<uint8_t*>(w.data()));
    std::vector<DeviceBuffer> keep;
    const Tensor prepared = fast.prepare_weight(host, keep);
    ASSERT_NE(prepared.data, host.data) << "the Avx512 backend repacks " << dtype_name(t);
    for (int64_t n : {1, 3, 4, 9, 33}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(n_out) + "x" + std::to_string(n_in) + ", " + std::to_string(n) + " tokens");
      auto x = test::random_floats(size_t(n * n_in), 9u + uint32_t(n));
      for (size_t i = 0; i < x.size(); i += 53) x[i] *= 20.0f;  // outliers
      std::vector<float> got(size_t(n * n_out)), want(size_t(n * n_out));
      const Tensor tx = Tensor::make(DType::F32, {n, n_in}, x.data());
      fast.matmul(Tensor::make(DType::F32, {n, n_out}, got.data()), tx, prepared, Tensor{});
      fast.matmul(Tensor::make(DType::F32, {n, n_out}, want.data()), tx, host, Tensor{});  // row-major g4_tile
      // same quantized activations and weights, exact integer dots; only the float sums' order differs
      // (and for Q4_0 the -8 offset: -8 d times the activations' float sum s instead of inside the integers)
      EXPECT_LT(test::rel_l2(got, want), 1e-5);
    }
  }
}

TEST(Q4_1x8, OnlyTheAvx512FastBackendRepacks) {
  const auto w = random_q4(DType::Q4_1, 16, 64, 5u);
  const Tensor host = Tensor::make(DType::Q4_1, {16, 64}, const_cast<uint8_t*>(w.data()));
  std::vector<DeviceBuffer> keep;
  // The reference backend at the widest level this CPU runs (AVX-512 where it has it: where the fast one repacks).
  CpuBackend ref({.kernels = CpuKernels::Reference, .n_threads = 1, .simd = supported_simd_levels().back()});
  EXPECT_EQ(ref.prepare_weight(host, keep).data, host.data);
  for (SimdLevel level : supported_simd_levels()) {
    if (level == SimdLevel::Avx512) continue;
    CpuBackend fast({.kernels = CpuKernels::Fast, .n_threads = 1, .simd = level});
    EXPECT_EQ(fast.prepare_weight(host, keep).data, host.data) << simd_level_name(level);
  }
  EXPECT_TRUE(keep.empty());
}

TEST(Q4_1x8, EmbeddingOfRepackedTableEqualsOriginal) {
  if (!cpu_supports(SimdLevel::Avx512) || !q4_1x8_supported()) GTEST_SKIP() << "no AVX-512 VNNI";
  CpuBackend fast({.kernels = CpuKernels::Fast, .n_threads = 1, .simd = SimdLevel::Avx512});
  const int64_t vocab = 45, dim = 96;
  for (DType t : kTypes) {
    const auto w = random_q4(t, vocab, dim, 17u);
    const Tensor host = Tensor::make(t, {vocab, dim}, const_cast<uint8_t*>(w.data()));
    std::vector<DeviceBuffer> keep;
    const Tensor table = fast.prepare_weight(host, keep);
    ASSERT_NE(table.data, host.data);
    std::vector<int32_t> ids = {0, 44, 7, 8, 15, 16, 40, 7};
    const Tensor tids = Tensor::make(DType::I32, {int64_t(ids.size())}, ids.data());
    std::vector<float> got(ids.size() * size_t(dim)), want(ids.size() * size_t(dim));
    fast.embedding(Tensor::make(DType::F32, {int64_t(ids.size()), dim}, got.data()), table, tids);
    fast.embedding(Tensor::make(DType::F32, {int64_t(ids.size()), dim}, want.data()), host, tids);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << dtype_name(t);
  }
}

}  // namespace
}  // namespace ferry
