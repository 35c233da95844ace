// GPU sampling (backends/cuda/sampling.cuh) at vocab 128256 (Llama 3) for m = 1..256 rows and four settings:
// greedy, the CLI default (T 0.8, top-k 40, top-p 0.95, min-p 0.05), dense top-p (T 1, top-p 0.9: the nucleus
// path) and min-p alone (T 1, min-p 0.05: the nucleus path without a top-p cut). Time per call (CUDA events around
// batches of 20 calls, median of 15 batches), the logits' bytes (m x vocab x 4, read once: the op's minimum), GB/s
// and the share of the 4.30 TB/s copy roofline, for the backend's choice (streaming passes split over blocks, the
// fast paths' scratch); then the same without the fast paths (split pass 1, the one-block draw), and pass 1 in the
// row's one block. Usage: sampling_bench [--json F].
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/sampling/sampling.cuh"
#include "cuda_bench.h"
#include "kernel_json.h"

namespace {

using namespace ferry;
constexpr double kRoofline = bench::kCopyBytesPerSecond;

// Microseconds per call: batches of 20 calls (the launch gap of short kernels hidden), median of 15.
template <class F>
double median_us(cudaStream_t s, F&& launch) { return 1e3 * bench::median_ms(s, launch, 15, 20, 5); }

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--json" && a + 1 < argc) {
      json_path = argv[++a];
    } else {
      std::fprintf(stderr, "usage: sampling_bench [--json FILE]\n");
      return 2;
    }
  }
  constexpr int64_t kVocab = 128256, kMaxM = 256;
  ferry::bench::KernelJson json;
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  float* logits = nullptr;                  // (kMaxM, kVocab) f32
  cuda_ops::SampleRowParams* rows = nullptr;  // (kMaxM)
  int32_t* out = nullptr;                   // (kMaxM)
  {
    std::vector<float> h(size_t(kMaxM * kVocab));
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0.0f, 3.0f);
    for (float& v : h) v = d(rng);
    BENCH_CUDA_CHECK(cudaMalloc(&logits, h.size() * 4));
    BENCH_CUDA_CHECK(cudaMemcpy(logits, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA_CHECK(cudaMalloc(&rows, kMaxM * sizeof(cuda_ops::SampleRowParams)));
    BENCH_CUDA_CHECK(cudaMalloc(&out, kMaxM * 4));
  }
  void* parts = nullptr;  // SampleParams::parts: the streaming passes split over blocks (the backend's choice)
  BENCH_CUDA_CHECK(cudaMalloc(&parts, cuda_ops::sample_rows_parts_bytes(kMaxM)));
  void* cand = nullptr;  // SampleParams::cand: the fast paths' scratch (zeroed; every call leaves it so)
  BENCH_CUDA_CHECK(cudaMalloc(&cand, cuda_ops::sample_rows_cand_bytes(kMaxM, kVocab)));
  BENCH_CUDA_CHECK(cudaMemset(cand, 0, cuda_ops::sample_rows_cand_bytes(kMaxM, kVocab)));
  struct Setting {
    const char* name;
    float t;
    int32_t k;
    float p, min_p;
  };
  const Setting settings[] = {{"greedy", 0.0f, 0, 1.0f, 0.0f},
                              {"T0.8_k40_p0.95_minp0.05", 0.8f, 40, 0.95f, 0.05f},
                              {"T1_p0.9", 1.0f, 0, 0.9f, 0.0f},
                              {"T1_minp0.05", 1.0f, 0, 1.0f, 0.05f}};
  std::printf("%-26s %4s %9s %8s %7s %16s %14s\n", "setting", "m", "us", "GB/s", "%roof", "us, no fast path",
              "us, 1 block p1");
  for (const Setting& st : settings) {
    std::vector<cuda_ops::SampleRowParams> h(kMaxM);
    for (int64_t r = 0; r < kMaxM; ++r) h[size_t(r)] = {st.t, st.k, st.p, st.min_p, uint64_t(r + 1), 100};
    BENCH_CUDA_CHECK(cudaMemcpy(rows, h.data(), h.size() * sizeof(h[0]), cudaMemcpyHostToDevice));
    for (const int64_t m : {1, 4, 16, 64, 256}) {
      // The backend's choice (CudaBackend::sample): the fast paths' scratch and the nucleus pass only where a row
      // needs them (greedy rows take pass 1 and the draw alone).
      const cuda_ops::SampleRowsNeed need = cuda_ops::sample_rows_need(h.data(), m, kVocab);
      const double us = median_us(s, [&] {
        cuda_ops::sample_rows({.logits = logits, .m = m, .vocab = kVocab, .rows = rows, .out = out, .parts = parts,
                               .cand = need.cand ? cand : nullptr, .nucleus = need.nucleus},
                              s);
      });
      const double us_split = median_us(s, [&] {  // split pass 1, every row on the one-block draw
        cuda_ops::sample_rows({.logits = logits, .m = m, .vocab = kVocab, .rows = rows, .out = out, .parts = parts}, s);
      });
      const double us_one = median_us(s, [&] {  // pass 1 in the row's one block (SampleParams::parts null)
        cuda_ops::sample_rows({.logits = logits, .m = m, .vocab = kVocab, .rows = rows, .out = out}, s);
      });
      const double bytes = double(m) * kVocab * 4, gbs = bytes / (us * 1e-6) / 1e9;
      std::printf("%-26s %4lld %9.2f %8.0f %6.1f%% %16.2f %14.2f\n", st.name, (long long)m, us, gbs,
                  100.0 * gbs * 1e9 / kRoofline, us_split, us_one);
      std::fflush(stdout);
      json.add(std::string("sample ") + st.name + " m" + std::to_string(m), 0.0, bytes, us * 1e-6);
    }
  }
  BENCH_CUDA_CHECK(cudaStreamSynchronize(s));
  return json.write(json_path) ? 0 : 1;
}
