// Shared by every CUDA file of the backend: error checking and small launch helpers. Compiles under nvcc
// and the host compiler alike (no kernels here), and deliberately pulls in no fmt/ferry headers, so the
// .cu files stay quick to compile. The failure functions live in launch.cpp and throw ferry::Error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda_ops {

// Throws ferry::Error: "CUDA error <name> (<string>) in <expr> at <file>:<line>".
[[noreturn]] void cuda_fail(cudaError_t err, const char* expr, const char* file, int line);
// Throws ferry::Error for a violated launcher precondition (a programming error, like FERRY_ASSERT).
[[noreturn]] void precondition_fail(const char* cond, const char* file, int line);

// Blocks of `block` threads covering `total` items (at least one block).
inline unsigned grid_for(int64_t total, int block) {
  const int64_t g = (total + block - 1) / block;
  return unsigned(g < 1 ? 1 : g);
}

}  // namespace ferry::cuda_ops

// FERRY_HD: a function both the host and the device compile (plans, layouts), plain C++ under the host compiler.
#ifdef __CUDACC__
#define FERRY_HD __host__ __device__
#else
#define FERRY_HD
#endif

// FERRY_CUDA_CHECK(cudaMalloc(...)): throws ferry::Error naming the call, the CUDA error and the place.
#define FERRY_CUDA_CHECK(expr)                                                          \
  do {                                                                                  \
    const cudaError_t ferry_err_ = (expr);                                              \
    if (ferry_err_ != cudaSuccess) ::ferry::cuda_ops::cuda_fail(ferry_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: reports a bad configuration (grid, shared memory) at the launch site.
#define FERRY_CUDA_CHECK_LAUNCH(kernel_name) FERRY_CUDA_CHECK(cudaGetLastError())

// A launcher's precondition (shapes, alignment); throws ferry::Error with file and line.
#define FERRY_CUDA_REQUIRE(cond)                                                            \
  do {                                                                                      \
    if (!(cond)) ::ferry::cuda_ops::precondition_fail(#cond, __FILE__, __LINE__);           \
  } while (0)
