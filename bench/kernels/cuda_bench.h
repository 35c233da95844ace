// What the CUDA kernel harnesses share: a fatal CUDA check (a harness has nothing to recover), the measured
// copy-bandwidth roof of the H200 (../shared/GPU.md), and event timing.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

}  // namespace ferry::bench
