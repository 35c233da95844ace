// Shared by the CUDA op tests: a fixture with the CPU reference backend (the oracle) and the CUDA backend,
// upload/download helpers, NaN-poisoned outputs, random data, relative L2 error. Every test skips when
// there is no CUDA device.
#pragma once

#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"

namespace ferry::test {

// ||got - ref|| / ||ref||; NaN when got holds a NaN (an unwritten, poisoned element), so comparisons fail.
inline double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    if (std::isnan(got[i])) return std::numeric_limits<double>::quiet_NaN();
    num += double(got[i] - ref[i]) * double(got[i] - ref[i]);
    den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / den);
}

// Normal(0, scale) values, never exactly zero.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) {
    x = dist(rng);
    if (x == 0.0f) x = 1e-3f * scale;
  }
  return v;
}

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    gpu_ = std::make_unique<CudaBackend>();
  }

  // A device tensor holding `bytes` of `data` (or uninitialised when data is null).
  Tensor upload(DType dt, std::initializer_list<int64_t> dims, const void* data) {
    Tensor shape = Tensor::make(dt, dims, nullptr);
    keep_.push_back(gpu_->alloc(shape.nbytes()));
    Tensor t = Tensor::make(dt, dims, keep_.back().data(), Device::Cuda);
    if (data) gpu_->copy_to_device(t, data, t.nbytes());
    return t;
  }
  template <typename T>
  Tensor upload(DType dt, std::initializer_list<int64_t> dims, const std::vector<T>& v) {
    Tensor t = upload(dt, dims, static_cast<const void*>(v.data()));
    EXPECT_EQ(t.nbytes(), v.size() * sizeof(T));
    return t;
  }
  // An f32 device tensor filled with NaN, so any element a kernel fails to write shows up.
  Tensor poisoned(std::initializer_list<int64_t> dims) {
    Tensor t = upload(DType::F32, dims, nullptr);
    const std::vector<float> nan(size_t(t.numel()), std::numeric_limits<float>::quiet_NaN());
    gpu_->copy_to_device(t, nan.data(), t.nbytes());
    return t;
  }
  std::vector<float> download(const Tensor& t) {
    std::vector<float> v(size_t(t.numel()));
    gpu_->copy_to_host(v.data(), t, v.size() * 4);
    return v;
  }
  // A host tensor over a vector (for the CPU reference).
  template <typename T>
  static Tensor host(DType dt, std::initializer_list<int64_t> dims, std::vector<T>& v) {
    return Tensor::make(dt, dims, v.data());
  }

  CpuBackend cpu_{CpuBackendOptions{.kernels = CpuKernels::Reference, .n_threads = 0, .simd = SimdLevel::Scalar}};
  std::unique_ptr<CudaBackend> gpu_;
  std::vector<DeviceBuffer> keep_;
};

}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
