// Phase stamps (phase_stamps.cuh, stamp_table.h; FERRY_CUDA_STAMPS): a matvec v10 launch given a stamp slot
// writes its five phase points from block 0 in order (entry <= waited <= acts <= consumed <= stored, all nonzero),
// the same output as without stamps, and the table reports the kind with its phases; a kind that was never
// launched is not reported.
#ifdef FERRY_HAS_CUDA

#include <cmath>
#include <cstring>
#include <string>

#include "backends/cuda/cuda_backend_views.h"
#include "backends/cuda/diag/stamp_table.h"
#include "backends/cuda/matmul/matvec.cuh"
#include "cuda_test_util.h"
#include "formats/quant.h"

namespace ferry::test {
namespace {

class CudaPhaseStamps : public CudaOpsTest {};

TEST_F(CudaPhaseStamps, MatvecV10StampsItsPhasesInOrder) {
  constexpr int64_t kRows = 4096, kCols = 4096;
  const std::vector<float> f = random_floats(size_t(kRows * kCols), 31, 1.0f / 64.0f);
  std::vector<uint8_t> q(size_t(kRows) * row_bytes(DType::Q4_0, kCols));
  for (int64_t r = 0; r < kRows; ++r)
    quantize_row(DType::Q4_0, f.data() + r * kCols, q.data() + size_t(r) * row_bytes(DType::Q4_0, kCols), kCols);
  const Tensor w = gpu_->prepare_weight(Tensor::make(DType::Q4_0, {kRows, kCols}, q.data()), keep_);
  const Tensor x = upload(DType::F32, {1, kCols}, random_floats(size_t(kCols), 32));
  const Tensor plain = poisoned({1, kRows}), stamped = poisoned({1, kRows});

  DeviceBuffer words = gpu_->alloc(size_t(cuda_ops::StampTable::kMaxKinds) * cuda_ops::kStampSlots * 8);
  ASSERT_EQ(cudaMemset(words.data(), 0, words.bytes()), cudaSuccess);
  const auto* at = static_cast<const unsigned long long*>(words.data());
  cuda_ops::StampTable table(std::move(words));
  const cuda_ops::PhaseStamps slots = table.slots("matvec Q4_0 4096x4096", {"waited", "acts", "consumed", "stored"});
  table.slots("never launched", {"a"});
  ASSERT_NE(slots.at, nullptr);

  cuda_ops::matvec(DType::Q4_0, {.w = weight_view(w), .x = x.ptr<float>(), .bias = nullptr,
                                 .out = plain.ptr<float>(), .n_tokens = 1, .kernel = cuda_ops::MatvecKernel::kStreamQuant},
                   nullptr);
  cuda_ops::matvec(DType::Q4_0, {.w = weight_view(w), .x = x.ptr<float>(), .bias = nullptr,
                                 .out = stamped.ptr<float>(), .n_tokens = 1, .kernel = cuda_ops::MatvecKernel::kStreamQuant, .stamps = slots},
                   nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> a = download(plain), b = download(stamped);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "stamps changed the output";

  unsigned long long s[cuda_ops::kStampSlots];
  ASSERT_EQ(cudaMemcpy(s, at, sizeof(s), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 5; ++i) EXPECT_NE(s[i], 0ull) << "phase " << i << " not stamped";
  for (int i = 1; i < 5; ++i) EXPECT_LE(s[i - 1], s[i]) << "phase " << i << " before phase " << i - 1;
  EXPECT_LT(s[4] - s[0], 10'000'000ull) << "phases more than 10 ms apart";

  const std::string report = table.report();
  std::printf("%s", report.c_str());
  EXPECT_NE(report.find("matvec Q4_0 4096x4096"), std::string::npos);
  EXPECT_NE(report.find("consumed"), std::string::npos);
  EXPECT_EQ(report.find("never launched"), std::string::npos);
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
