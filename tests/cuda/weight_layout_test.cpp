// Host-only (runs without a GPU): the device weight layouts of weight_layout.cuh, built by the same repack
// code prepare_weight uses, decoded by the same decoders the kernels use (compiled for the host here),
// must give back dequantize_row's values, every column exactly once.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/matmul/weight_layout.cuh"
#include "backends/cuda/matmul/weight_repack.h"
#include "formats/quant.h"
#include "device_layout.h"

namespace ferry::cuda_ops {
namespace {

TEST(CudaWeightLayout, DecodersReproduceDequantizeRow) {
  const int64_t rows = 3, cols = 768;
  for (const DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                        DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::F8_E4M3_B128}) {
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

}  // namespace
}  // namespace ferry::cuda_ops

#endif  // FERRY_HAS_CUDA
