// Host-only (runs without a GPU): the device weight layouts of weight_layout.cuh, built by the same repack
// code prepare_weight uses, decoded by the same decoders the kernels use (compiled for the host here),
// must give back dequantize_row's values, every column exactly once.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/matmul/weight_layout.cuh"
#include "backends/cuda/matmul/weight_repack.h"
#include "core/fp16.h"
#include "formats/quant.h"
#include "device_layout.h"

namespace ferry::cuda_ops {
namespace {

TEST(CudaWeightLayout, DecodersReproduceDequantizeRow) {
  const int64_t rows = 3, cols = 768;
  for (const DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                        DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                        DType::F8_E4M3_B128}) {
    std::mt19937 rng(uint32_t(t) + 1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> f(size_t(rows * cols));
    for (float& x : f) x = dist(rng);
    std::vector<uint8_t> gguf(size_t(rows) * row_bytes(t, cols));
    for (int64_t r = 0; r < rows; ++r)
      quantize_row(t, f.data() + r * cols, gguf.data() + size_t(r) * row_bytes(t, cols), cols);
    const std::vector<uint8_t> dev = device_layout(t, gguf, rows, cols);
    const WeightView w{dev.data(), rows, cols, is_split_type(t) ? scales_offset(t, rows, cols) : 0};
    const bool ok = visit_decoder(t, [&]<class D>() {
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> ref(static_cast<size_t>(cols)), got(static_cast<size_t>(cols), 0.0f);
        std::vector<int> seen(static_cast<size_t>(cols), 0);
        dequantize_row(t, gguf.data() + size_t(r) * row_bytes(t, cols), ref.data(), cols);
        for (int64_t c = 0; c < D::chunks(cols); ++c) {
          float v[D::kVals];
          D::decode(D::load(w, r, c), v);
          for (int run = 0; run < D::kRuns; ++run)
            for (int j = 0; j < D::kRunLen; ++j) {
              const int64_t col = D::run_start(c, run) + j;
              ASSERT_TRUE(col >= 0 && col < cols) << dtype_name(t);
              got[size_t(col)] = v[run * D::kRunLen + j];
              seen[size_t(col)]++;
            }
        }
        for (int64_t col = 0; col < cols; ++col) {
          ASSERT_EQ(seen[size_t(col)], 1) << dtype_name(t) << " column " << col;
          ASSERT_NEAR(got[size_t(col)], ref[size_t(col)], 1e-6f * (1.0f + std::fabs(ref[size_t(col)])))
              << dtype_name(t) << " row " << r << " column " << col;
        }
      }
    });
    EXPECT_TRUE(ok) << dtype_name(t);
  }
}

// Random GGUF blocks of Q2_K / Q3_K (not quantize_row's output: every scale byte, quant byte and fp16 scale drawn
// at random, no zero scale anywhere, signs of d and dmin both ways), decoded bit for bit as dequantize_row does.
std::vector<uint8_t> random_k_blocks(DType t, int64_t n_blocks, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255), nibble(1, 15);
  std::uniform_real_distribution<float> mag(1e-3f, 2.0f);
  const auto half = [&] { return f32_to_fp16((byte(rng) & 1 ? -1.0f : 1.0f) * mag(rng)); };
  std::vector<uint8_t> out(size_t(n_blocks) * row_bytes(t, kKBlock));
  for (int64_t b = 0; b < n_blocks; ++b) {
    if (t == DType::Q2_K) {
      auto* x = reinterpret_cast<BlockQ2_K*>(out.data()) + b;
      for (uint8_t& s : x->scales) s = uint8_t(nibble(rng) | nibble(rng) << 4);
      for (uint8_t& q : x->qs) q = uint8_t(byte(rng));
      x->d = half();
      x->dmin = half();
    } else {
      auto* x = reinterpret_cast<BlockQ3_K*>(out.data()) + b;
      for (uint8_t& q : x->hmask) q = uint8_t(byte(rng));
      for (uint8_t& q : x->qs) q = uint8_t(byte(rng));
      int8_t sc[16];
      do {
        for (uint8_t& s : x->scales) s = uint8_t(byte(rng));
        q3k_scales(x->scales, sc);
      } while (std::any_of(sc, sc + 16, [](int8_t v) { return v == 0; }));
      x->d = half();
    }
  }
  return out;
}

TEST(CudaWeightLayout, LowBitKQuantsDecodeBitExact) {
  for (const DType t : {DType::Q2_K, DType::Q3_K}) {
    std::mt19937 rng(uint32_t(t) * 7 + 3);
    for (const int64_t rows : {1, 3, 5})
      for (const int64_t cols : {256, 512, 1280}) {
        const size_t rb = row_bytes(t, cols);
        const std::vector<uint8_t> gguf = random_k_blocks(t, rows * (cols / kKBlock), rng);
        const std::vector<uint8_t> dev = device_layout(t, gguf, rows, cols);
        const WeightView w{dev.data(), rows, cols, scales_offset(t, rows, cols)};
        ASSERT_TRUE(visit_decoder(t, [&]<class D>() {
          static_assert(sizeof(typename D::Raw) <= 64, "a chunk loads at most 64 bytes");
          for (int64_t r = 0; r < rows; ++r) {
            std::vector<float> ref(static_cast<size_t>(cols)), got(static_cast<size_t>(cols), 0.0f);
            std::vector<int> seen(static_cast<size_t>(cols), 0);
            dequantize_row(t, gguf.data() + size_t(r) * rb, ref.data(), cols);
            for (int64_t c = 0; c < D::chunks(cols); ++c) {
              float v[D::kVals];
              D::decode(D::load(w, r, c), v);
              for (int run = 0; run < D::kRuns; ++run)
                for (int j = 0; j < D::kRunLen; ++j) {
                  const int64_t col = D::run_start(c, run) + j;
                  ASSERT_TRUE(col >= 0 && col < cols);
                  got[size_t(col)] = v[run * D::kRunLen + j];
                  seen[size_t(col)]++;
                }
            }
            for (int64_t col = 0; col < cols; ++col) {
              ASSERT_EQ(seen[size_t(col)], 1) << dtype_name(t) << " column " << col;
              uint32_t a, b;
              std::memcpy(&a, &got[size_t(col)], 4);
              std::memcpy(&b, &ref[size_t(col)], 4);
              ASSERT_EQ(a, b) << dtype_name(t) << " " << rows << "x" << cols << " row " << r << " column " << col
                              << ": " << got[size_t(col)] << " vs " << ref[size_t(col)];
            }
          }
        }));
      }
  }
}

// The device copy of a Q2_K / Q3_K weight is at most 1.05 x its file bytes: Q2_K the same bytes, Q3_K 112 of every
// 110 (its records padded to 16), both plus < 256 bytes between the quants and the records.
TEST(CudaWeightLayout, LowBitKQuantsStayAsCompactAsTheirFiles) {
  struct Shape {
    int64_t rows, cols;
  };
  for (const DType t : {DType::Q2_K, DType::Q3_K}) {
    EXPECT_TRUE(is_native_weight_type(t)) << dtype_name(t);
    for (const Shape s : {Shape{96, 512}, Shape{70, 768}, Shape{4096, 4096}, Shape{14336, 4096}, Shape{4096, 14336},
                          Shape{1024, 4096}, Shape{128256, 4096}, Shape{7, 2304}}) {
      const size_t file = size_t(s.rows) * row_bytes(t, s.cols);
      const size_t blocks = size_t(s.rows) * size_t(s.cols / kKBlock);
      const size_t prepared = prepared_bytes(t, s.rows, s.cols);
      const size_t pad = t == DType::Q3_K ? 2 * blocks : 0;
      EXPECT_GE(prepared, file + pad) << dtype_name(t) << " " << s.rows << "x" << s.cols;
      EXPECT_LT(prepared, file + pad + kScalesAlign) << dtype_name(t) << " " << s.rows << "x" << s.cols;
      EXPECT_LE(double(prepared), 1.05 * double(file)) << dtype_name(t) << " " << s.rows << "x" << s.cols;
    }
  }
}

}  // namespace
}  // namespace ferry::cuda_ops

#endif  // FERRY_HAS_CUDA
