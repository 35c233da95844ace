// What the CUDA kernel harnesses share: a fatal CUDA check (a harness has nothing to recover), the measured
// copy-bandwidth roof of the H200 (../shared/GPU.md), and event timing.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define BENCH_CUDA_CHECK(expr)                                           \
  do {                                                                   \
    const cudaError_t e_ = (expr);                                       \
    if (e_ != cudaSuccess) {                                             \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(e_));   \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

namespace ferry::bench {

inline constexpr double kCopyBytesPerSecond = 4.30e12;  // device-to-device copy, bytes read + written

// A device copy of v (at least one byte allocated); its allocation is appended to keep, which the caller frees.
template <typename T>
T* upload(const std::vector<T>& v, std::vector<void*>& keep) {
  void* d = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(1, v.size() * sizeof(T))));
  BENCH_CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  keep.push_back(d);
  return static_cast<T*>(d);
}

// Milliseconds per call of `launch` on stream `s`: `warmup` calls, then `samples` event-timed batches of
// `per_sample` back-to-back calls each; returns the median batch time divided by per_sample (per_sample > 1
// hides the launch gap of very short kernels; 1 times each call alone).
template <class F>
double median_ms(cudaStream_t s, F&& launch, int samples = 15, int per_sample = 1, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) launch();
  BENCH_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  BENCH_CUDA_CHECK(cudaEventCreate(&a));
  BENCH_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < samples; ++i) {
    BENCH_CUDA_CHECK(cudaEventRecord(a, s));
    for (int j = 0; j < per_sample; ++j) launch();
    BENCH_CUDA_CHECK(cudaEventRecord(b, s));
    BENCH_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms / float(per_sample));
  }
  BENCH_CUDA_CHECK(cudaGetLastError());
  BENCH_CUDA_CHECK(cudaEventDestroy(a));
  BENCH_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return double(t[t.size() / 2]);
}

// Device 0's properties, its name and SM count printed first; false (and "no CUDA device" on stderr) when there
// is none.
inline bool report_device(cudaDeviceProp& prop) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return false;
  }
  BENCH_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  return true;
}

// `count` random bf16 values (normal, scale 1, never zero) in device memory: an 8 Mi-value random block copied
// repeatedly. The caller frees it (cudaFree).
inline uint16_t* random_bf16(size_t count, uint32_t seed) {
  uint16_t* d = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&d, count * 2));
  std::vector<uint16_t> block(size_t(8) << 20);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0, 1);
  for (uint16_t& v : block) {
    float f = dist(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    v = uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
    if ((v & 0x7FFF) == 0) v = 0x3C00;
  }
  for (size_t at = 0; at < count; at += block.size())
    BENCH_CUDA_CHECK(cudaMemcpy(d + at, block.data(), std::min(block.size(), count - at) * 2, cudaMemcpyHostToDevice));
  return d;
}

// Relative L2 error of a against the reference ref (same size); infinity when a holds a non-finite value, so a
// broken kernel never reads as accurate.
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += double(a[i] - ref[i]) * double(a[i] - ref[i]);
    den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / den);
}

// The Llama-3-8B projection weights (rows x k) and their TP=2 halves, as the GEMM harnesses sweep them.
struct ProjectionShape {
  const char* name;
  int64_t rows, k;
};
inline constexpr ProjectionShape kLlama3ProjectionShapes[] = {
    {"qkv", 6144, 4096},      {"wo", 4096, 4096},          {"gate_up", 28672, 4096},
    {"down", 4096, 14336},    {"lm_head", 128256, 4096},   {"tp2 qkv", 3072, 4096},
    {"tp2 wo", 4096, 2048},   {"tp2 gate_up", 14336, 4096}, {"tp2 down", 4096, 7168}};

}  // namespace ferry::bench
