// Shared by the CUDA op tests: a fixture with the CPU reference backend (the oracle) and the CUDA backend,
// upload/download helpers, NaN-poisoned outputs, random data, relative L2 error. Every test skips when
// there is no CUDA device.
#pragma once

#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "core/fp16.h"
#include "formats/quant.h"
#include "fixtures/numeric.h"

// ASSERT_CUDA_OK(cudaMemcpy(...)): the call returned cudaSuccess (the call's text in the failure message).
#define ASSERT_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

namespace ferry::test {

// A (rows, cols) weight of type t made from random floats (quantized where t is a block type), in host
// memory: the bytes the model file would hold.
inline std::vector<uint8_t> make_weight(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> f = random_floats(size_t(rows * cols), seed, 0.5f);
  std::vector<uint8_t> bytes(size_t(rows) * row_bytes(t, cols));
  for (int64_t r = 0; r < rows; ++r)
    quantize_row(t, f.data() + r * cols, bytes.data() + size_t(r) * row_bytes(t, cols), cols);
  return bytes;
}

// Every value rounded to bf16 (round to nearest even: core/fp16.h) as bits.
inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = f32_to_bf16(v[i]);
  return r;
}

// The SM count of device 0 when it is a Hopper (compute capability 9.x), else 0 (no device or another kind): the
// sm_90a-only kernels' tests skip on 0.
inline int hopper_sm_count() {
  if (CudaBackend::device_count() == 0) return 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) return 0;
  return prop.multiProcessorCount;
}

// The float64 reference of out (n, rows) = x (n, k) . w (rows, k)^T over bf16 bit patterns, rounded to f32.
inline std::vector<float> reference_gemm_bf16(const std::vector<uint16_t>& xb, const std::vector<uint16_t>& wb,
                                              int64_t n, int64_t rows, int64_t k) {
  std::vector<double> xd(xb.size()), wd(wb.size());
  for (size_t i = 0; i < xb.size(); ++i) xd[i] = bf16_to_f32(xb[i]);
  for (size_t i = 0; i < wb.size(); ++i) wd[i] = bf16_to_f32(wb[i]);
  std::vector<float> ref(size_t(n * rows));
  for (int64_t t = 0; t < n; ++t) {
    const double* xr = xd.data() + t * k;
    for (int64_t r = 0; r < rows; ++r) {
      const double* wr = wd.data() + r * k;
      double s = 0;
      for (int64_t i = 0; i < k; ++i) s += xr[i] * wr[i];
      ref[size_t(t * rows + r)] = float(s);
    }
  }
  return ref;
}

// The two runs of a GEMM kernel test (run 0 on the legacy stream, run 1 with PDL), each output NaN-poisoned past
// its first `valid` values: nothing was written past the output, both runs gave the same bits, and run 0 is within
// `tol` (relative L2) of ref. Prints the error under `what`.
inline void expect_two_runs_match(std::vector<float> (&got)[2], size_t valid, const std::vector<float>& ref, double tol,
                                  const std::string& what) {
  bool guard_intact = true;
  for (size_t i = valid; i < got[0].size(); ++i) guard_intact &= std::isnan(got[0][i]) && std::isnan(got[1][i]);
  EXPECT_TRUE(guard_intact) << what << ": a write past the output";
  EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), valid * 4), 0) << what << ": runs differ";
  got[0].resize(valid);
  const double err = rel_l2(got[0], ref);
  EXPECT_LE(err, tol) << what;
  std::printf("  %-44s rel L2 %.2e\n", what.c_str(), err);
}

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    // The op tests hold every path to fp32-level bounds (1e-4 for the int8 matvecs), so their backend keeps two
    // int8 levels of activations (FERRY_CUDA_TUNE=act_levels=2); the one-level default has its own tests
    // (matvec_test's kOneLevelTol, the stream_quant emulation).
    CudaBackendOptions options;
    options.tune.act_levels = 2;
    gpu_ = std::make_unique<CudaBackend>(options);
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
