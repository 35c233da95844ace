// Runs on every machine: whether this build has the CUDA backend, and that without a device it says so
// clearly (the CI and dev machines have nvcc but no GPU).
#include <gtest/gtest.h>

#include <string>

#include "ferry/engine.h"
#include "fixtures/test_paths.h"

#ifdef FERRY_HAS_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace ferry {
namespace {

#ifdef FERRY_HAS_CUDA

TEST(CudaBuild, BackendOrClearNoDeviceError) {
  if (CudaBackend::device_count() > 0) {
    CudaBackend b;
    EXPECT_EQ(b.name(), "cuda");
    EXPECT_EQ(b.device(), Device::Cuda);
    return;
  }
  try {
    CudaBackend b;
    FAIL() << "CudaBackend constructed without a device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

TEST(CudaBuild, EngineWithoutDeviceSaysSo) {
  if (CudaBackend::device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  EngineOptions o;
  o.model_path = test::source_dir() + "/tests/fixtures/models/tiny-llama";
  o.device = "cuda";
  try {
    Engine e(o);
    FAIL() << "Engine opened on cuda without a device";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

#else

TEST(CudaBuild, EngineRefusesCudaWithoutTheBackend) {
  EngineOptions o;
  o.model_path = test::source_dir() + "/tests/fixtures/models/tiny-llama";
  o.device = "cuda";
  EXPECT_THROW(Engine e(o), std::exception);
}

#endif

}  // namespace
}  // namespace ferry
