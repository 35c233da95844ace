// The memory-bound CUDA ops at prefill sizes (n = 512..8192 tokens, dim 4096, hidden 14336, Llama-3-8B shape):
// RMSNorm, RMSNorm fused with the residual add, RoPE on q (32 heads x 128, both orderings), SwiGLU, embedding
// gather (BF16 table, vocab 128256). Per op and n: time per call (CUDA events around batches of 20 calls,
// median of 15 batches after 5 warm-ups), bytes moved (each tensor read or written once: the op's minimum),
// GB/s and the share of the 4.30 TB/s copy roofline (../shared/GPU.md). Usage: fused_ops_bench [--json FILE].
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/embedding.cuh"
#include "backends/cuda/norm.cuh"
#include "backends/cuda/rope.cuh"
#include "cuda_bench.h"
#include "kernel_json.h"

namespace {

using namespace ferry;
constexpr double kRoofline = bench::kCopyBytesPerSecond;

// Microseconds per call: batches of 20 calls (the launch gap of short kernels hidden), median of 15.
template <class F>
double median_us(cudaStream_t s, F&& launch) { return 1e3 * bench::median_ms(s, launch, 15, 20, 5); }

// A device buffer of `count` random floats (Normal(0, 1)).
float* random_device(size_t count, uint32_t seed) {
  std::vector<float> h(count);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (float& v : h) v = d(rng);
  float* p = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&p, count * 4));
  BENCH_CUDA_CHECK(cudaMemcpy(p, h.data(), count * 4, cudaMemcpyHostToDevice));
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--json" && a + 1 < argc) {
      json_path = argv[++a];
    } else {
      std::fprintf(stderr, "usage: fused_ops_bench [--json FILE]\n");
      return 2;
    }
  }
  constexpr int64_t kDim = 4096, kHidden = 14336, kVocab = 128256, kHeads = 32, kHeadDim = 128, kMaxN = 8192;
  ferry::bench::KernelJson json;
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  float* x = random_device(size_t(kMaxN) * kHidden, 1);      // (n, up to hidden)
  float* y = random_device(size_t(kMaxN) * kHidden, 2);      // (n, up to hidden)
  float* out = random_device(size_t(kMaxN) * kHidden, 3);    // (n, up to hidden)
  float* weight = random_device(kDim, 4);                    // (dim)
  float* inv_freq = random_device(kHeadDim / 2, 5);          // (head_dim / 2)
  int32_t* ids = nullptr;                                    // (n) token ids, also used as positions
  uint16_t* table = nullptr;                                 // (vocab, dim) bf16
  {
    std::vector<int32_t> h(kMaxN);
    std::mt19937 rng(6);
    for (int32_t& v : h) v = int32_t(rng() % kVocab);
    BENCH_CUDA_CHECK(cudaMalloc(&ids, h.size() * 4));
    BENCH_CUDA_CHECK(cudaMemcpy(ids, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA_CHECK(cudaMalloc(&table, size_t(kVocab) * kDim * 2));
    BENCH_CUDA_CHECK(cudaMemset(table, 0x3c, size_t(kVocab) * kDim * 2));
  }
  std::printf("%-22s %6s %9s %9s %8s %7s\n", "op", "n", "us", "MB", "GB/s", "%roof");
  const auto report = [&](const char* op, int64_t n, double bytes, double us) {
    const double gbs = bytes / (us * 1e-6) / 1e9;
    std::printf("%-22s %6lld %9.2f %9.1f %8.0f %6.1f%%\n", op, (long long)n, us, bytes / 1e6, gbs,
                100.0 * gbs * 1e9 / kRoofline);
    std::fflush(stdout);
    json.add(std::string(op) + " n" + std::to_string(n), 0.0, bytes, us * 1e-6);
  };
  for (const int64_t n : {512, 2048, 8192}) {
    const double act = double(n) * kDim * 4;  // one (n, dim) f32 tensor
    report("rms_norm", n, 2 * act + kDim * 4, median_us(s, [&] {
      cuda_ops::rms_norm({.out = out, .x = x, .residual = nullptr, .delta = nullptr, .weight = weight, .rows = n,
                          .cols = kDim, .eps = 1e-5f},
                         s);
    }));
    report("add_rms_norm", n, 4 * act + kDim * 4, median_us(s, [&] {
      cuda_ops::add_rms_norm({.out = out, .x = nullptr, .residual = x, .delta = y, .weight = weight, .rows = n,
                              .cols = kDim, .eps = 1e-5f},
                             s);
    }));
    for (const bool interleaved : {false, true}) {
      report(interleaved ? "rope_q_interleaved" : "rope_q_neox", n, 2 * act + n * 4.0, median_us(s, [&] {
        cuda_ops::rope({.x = x, .positions = ids, .inv_freq = inv_freq, .n = n, .n_heads = kHeads,
                        .head_dim = kHeadDim, .half = kHeadDim / 2, .interleaved = interleaved},
                       s);
      }));
    }
    report("swiglu", n, 3.0 * double(n) * kHidden * 4, median_us(s, [&] {
      cuda_ops::swiglu(out, x, y, n * kHidden, s);
    }));
    const cuda_ops::WeightView tv{reinterpret_cast<const uint8_t*>(table), kVocab, kDim, 0};
    report("embedding_bf16", n, double(n) * kDim * (2 + 4) + n * 4.0, median_us(s, [&] {
      cuda_ops::embedding(DType::BF16, {.table = tv, .ids = ids, .out = out, .n = n, .errors = nullptr}, s);
    }));
  }
  BENCH_CUDA_CHECK(cudaStreamSynchronize(s));
  return json.write(json_path) ? 0 : 1;
}
