// Backend::set_weight_stream_order on CUDA: the streamed matvecs prefetch the next weight's head into L2
// (MatvecParams::next). A hint: the outputs must be the same bits as without it, for every weight type the
// matvecs stream (BF16, Q8_0, Q4_0, Q4_K), through matmul, matmul_swiglu (a fused gate|up weight: the pair form of
// the prefetch) and the last weight of the order (no successor). A decode-step-like chain q|k|v -> o -> gate|up ->
// down -> output per type, on random weights and inputs, against a backend with the option off.
#ifdef FERRY_HAS_CUDA

#include <cstring>
#include <string>

#include "cuda_test_util.h"
#include "formats/quant.h"

namespace ferry::test {
namespace {

std::vector<uint8_t> random_weight(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> f = random_floats(size_t(rows * cols), seed, 1.0f / std::sqrt(float(cols)));
  std::vector<uint8_t> bytes(size_t(rows) * row_bytes(t, cols));
  for (int64_t r = 0; r < rows; ++r)
    quantize_row(t, f.data() + r * cols, bytes.data() + size_t(r) * row_bytes(t, cols), cols);
  return bytes;
}

using CudaWeightPrefetch = CudaOpsTest;

TEST_F(CudaWeightPrefetch, OutputsAreTheSameBitsWithAndWithoutIt) {
  constexpr int64_t kDim = 1024, kQkv = 1536, kHidden = 3072, kVocab = 2000;
  for (const DType t : {DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
    SCOPED_TRACE(dtype_name(t));
    // (rows, cols) of q|k|v, o, gate|up, down, output
    const std::pair<int64_t, int64_t> shapes[] = {{kQkv, kDim}, {kDim, kDim}, {2 * kHidden, kDim}, {kDim, kHidden}, {kVocab, kDim}};
    std::vector<std::vector<uint8_t>> host;
    for (size_t i = 0; i < std::size(shapes); ++i)
      host.push_back(random_weight(t, shapes[i].first, shapes[i].second, 900 + uint32_t(i) + 10 * uint32_t(t)));
    CudaBackendOptions off_options;
    off_options.weight_prefetch = false;
    CudaBackend off(off_options);
    std::vector<DeviceBuffer> off_keep;
    std::vector<Tensor> on_w, off_w;
    for (size_t i = 0; i < std::size(shapes); ++i) {
      const Tensor hw = Tensor::make(t, {shapes[i].first, shapes[i].second}, host[i].data());
      on_w.push_back(gpu_->prepare_weight(hw, keep_));
      off_w.push_back(off.prepare_weight(hw, off_keep));
    }
    std::vector<Backend::StreamedWeight> order;
    for (size_t i = 0; i < on_w.size(); ++i) order.push_back({on_w[i], i == 2});
    gpu_->set_weight_stream_order(order);

    // The chain: each output (a random vector, so no value depends on the previous step's) through each weight.
    for (size_t i = 0; i < std::size(shapes); ++i) {
      const auto [rows, cols] = shapes[i];
      const std::vector<float> x = random_floats(size_t(cols), 950 + uint32_t(i));
      const int64_t out_cols = i == 2 ? rows / 2 : rows;
      const Tensor gx = upload(DType::F32, {1, cols}, x), out = poisoned({1, out_cols}), scratch = poisoned({1, rows});
      if (i == 2) {
        gpu_->matmul_swiglu(out, scratch, gx, on_w[i]);
      } else {
        gpu_->matmul(out, gx, on_w[i], Tensor{});
      }
      const std::vector<float> got = download(out);

      std::vector<DeviceBuffer> tmp;
      const auto off_tensor = [&](int64_t n) {
        tmp.push_back(off.alloc(size_t(n) * 4));
        return Tensor::make(DType::F32, {1, n}, tmp.back().data(), Device::Cuda);
      };
      const Tensor ox = off_tensor(cols), oout = off_tensor(out_cols), oscratch = off_tensor(rows);
      off.copy_to_device(ox, x.data(), x.size() * 4);
      if (i == 2) {
        off.matmul_swiglu(oout, oscratch, ox, off_w[i]);
      } else {
        off.matmul(oout, ox, off_w[i], Tensor{});
      }
      std::vector<float> want(static_cast<size_t>(out_cols));
      off.copy_to_host(want.data(), oout, want.size() * 4);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << "weight " << i << ": bits differ";
    }
  }
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
