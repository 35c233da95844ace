// The memory-bound CUDA ops at prefill sizes (n = 512..8192 tokens, dim 4096, hidden 14336, Llama-3-8B shape):
// RMSNorm and RMSNorm fused with the residual add (both as the model runs them at prefill, writing bf16 rows for
// the GEMM — CudaBackend::matmul_input_dtype is bf16 above 16 tokens — and with f32 output), RoPE on q (32 heads
// x 128, both orderings; the CUDA Llama path fuses it into qkv_epilogue, this is the standalone op), SwiGLU,
// embedding gather (BF16 table, vocab 128256, random ids as in the model, and sequential ids as a diagnostic).
// References at the same sizes: cudaMemsetAsync (write only) and cudaMemcpyAsync device to device.
//
// Per op and n: time per call (CUDA events around batches of 20 back-to-back calls, median of 15 batches after
// 5 warm-ups; the ops are PDL-launched as in the model's step), bytes moved (each tensor read or written once,
// in the dtypes that variant reads and writes: the op's minimum), and the share of the 4.30 TB/s copy roofline
// (../shared/GPU.md). Two timings:
//  - cold: the calls rotate over disjoint slices of the buffers, >= 256 MB per rotation (4x the 60 MB L2), so
//    every call reads DRAM: the figure the roofline is about;
//  - hot: every call on the same buffers (the earlier harness): at n <= 2048 the tensors may sit in L2.
// Usage: fused_ops_bench [--json FILE]. JSON rows: "<op> n<n>" (cold) and "<op> n<n> hot".
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/elementwise/elementwise.cuh"
#include "backends/cuda/elementwise/embedding.cuh"
#include "backends/cuda/elementwise/norm.cuh"
#include "backends/cuda/elementwise/rope.cuh"
#include "cuda_bench.h"
#include "kernel_json.h"

namespace {

using namespace ferry;
constexpr double kRoofline = bench::kCopyBytesPerSecond;
constexpr double kColdBytes = 256e6;  // bytes touched per rotation of the cold timing

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

int32_t* upload_ids(const std::vector<int32_t>& h) {
  int32_t* p = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&p, h.size() * 4));
  BENCH_CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  return p;
}

// Microseconds per call of run(slice): slices 0..slices-1 in turn (cold), or always slice 0 (hot).
double time_us(cudaStream_t s, int64_t slices, const std::function<void(int64_t)>& run) {
  int64_t next = 0;
  return 1e3 * bench::median_ms(s, [&] { run(next++ % slices); }, 15, 20, 5);
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
  cudaDeviceProp prop;
  if (!bench::report_device(prop)) return 1;
  constexpr int64_t kDim = 4096, kHidden = 14336, kVocab = 128256, kHeads = 32, kHeadDim = 128, kMaxN = 8192;
  constexpr int64_t kIdSlots = 8 * kMaxN;  // ids for the rotating slices
  const size_t kBufFloats = size_t(kMaxN) * kHidden;        // 470 MB each
  ferry::bench::KernelJson json;
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  float* x = random_device(kBufFloats, 1);      // slices of (n, dim) or (n, hidden) f32
  float* y = random_device(kBufFloats, 2);      // slices of (n, dim) or (n, hidden) f32
  float* out = random_device(kBufFloats, 3);    // slices of (n, dim) or (n, hidden) f32, or bf16 (n, dim)
  float* weight = random_device(kDim, 4);       // (dim)
  float* inv_freq = nullptr;                    // (head_dim / 2): 500000^(-2i/head_dim), as Llama 3
  {
    std::vector<float> h(kHeadDim / 2);
    for (size_t i = 0; i < h.size(); ++i) h[i] = float(std::pow(500000.0, -2.0 * double(i) / double(kHeadDim)));
    BENCH_CUDA_CHECK(cudaMalloc(&inv_freq, h.size() * 4));
    BENCH_CUDA_CHECK(cudaMemcpy(inv_freq, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  }
  int32_t* ids = nullptr;      // (kIdSlots) random token ids, also the rope positions
  int32_t* seq_ids = nullptr;  // (kIdSlots) i mod vocab: each slice is a contiguous run of table rows
  {
    std::vector<int32_t> h(kIdSlots);
    std::mt19937 rng(6);
    for (int32_t& v : h) v = int32_t(rng() % kVocab);
    ids = upload_ids(h);
    for (int64_t i = 0; i < kIdSlots; ++i) h[size_t(i)] = int32_t(i % kVocab);
    seq_ids = upload_ids(h);
  }
  uint16_t* table = bench::random_bf16(size_t(kVocab) * kDim, 7);  // (vocab, dim) bf16, 1.05 GB
  float* copy_src = random_device(kBufFloats / 2, 8);              // memcpy reference source

  std::printf("%-24s %6s %9s %8s %7s %9s %7s\n", "op", "n", "MB", "cold us", "%roof", "hot us", "%roof");
  const auto pct = [](double bytes, double us) { return 100.0 * bytes / (us * 1e-6) / kRoofline; };
  // slice_floats: floats of the largest per-call slice of x / y / out (the rotation's stride).
  const auto measure = [&](const char* op, int64_t n, double bytes, size_t slice_floats,
                           const std::function<void(int64_t)>& run) {
    const int64_t fit = int64_t(kBufFloats / slice_floats);
    const int64_t want = int64_t(kColdBytes / bytes) + 1;
    const int64_t slices = std::max<int64_t>(1, std::min({fit, want, kIdSlots / n}));
    const double cold = time_us(s, slices, run), hot = time_us(s, 1, run);
    std::printf("%-24s %6lld %9.1f %8.2f %6.1f%% %9.2f %6.1f%%\n", op, (long long)n, bytes / 1e6, cold,
                pct(bytes, cold), hot, pct(bytes, hot));
    std::fflush(stdout);
    json.add(std::string(op) + " n" + std::to_string(n), 0.0, bytes, cold * 1e-6);
    json.add(std::string(op) + " n" + std::to_string(n) + " hot", 0.0, bytes, hot * 1e-6);
  };
  for (const int64_t n : {512, 2048, 8192}) {
    const size_t act_floats = size_t(n) * kDim;
    const double act = double(act_floats) * 4;  // one (n, dim) f32 tensor
    const auto norm_params = [&](int64_t r, bool add, bool bf16) {
      cuda_ops::RmsNormParams p{.out = nullptr, .x = nullptr, .residual = nullptr, .delta = nullptr, .weight = weight,
                                .rows = n, .cols = kDim, .eps = 1e-5f};
      if (add) {
        p.residual = x + r * act_floats;
        p.delta = y + r * act_floats;
      } else {
        p.x = x + r * act_floats;
      }
      if (bf16) {
        p.out_bf16 = reinterpret_cast<uint16_t*>(out + r * act_floats);
      } else {
        p.out = out + r * act_floats;
      }
      return p;
    };
    // x read, out written (bf16 or f32), weight read.
    measure("rms_norm->bf16", n, act + act / 2 + kDim * 4, act_floats,
            [&](int64_t r) { cuda_ops::rms_norm(norm_params(r, false, true), s); });
    measure("rms_norm f32", n, 2 * act + kDim * 4, act_floats,
            [&](int64_t r) { cuda_ops::rms_norm(norm_params(r, false, false), s); });
    // residual read and written, delta read, out written, weight read.
    measure("add_rms_norm->bf16", n, 3 * act + act / 2 + kDim * 4, act_floats,
            [&](int64_t r) { cuda_ops::add_rms_norm(norm_params(r, true, true), s); });
    measure("add_rms_norm f32", n, 4 * act + kDim * 4, act_floats,
            [&](int64_t r) { cuda_ops::add_rms_norm(norm_params(r, true, false), s); });
    for (const bool interleaved : {false, true}) {
      measure(interleaved ? "rope_q_interleaved" : "rope_q_neox", n, 2 * act + n * 4.0, act_floats, [&](int64_t r) {
        cuda_ops::rope({.x = x + r * act_floats, .positions = ids + r * n, .inv_freq = inv_freq, .n = n,
                        .n_heads = kHeads, .head_dim = kHeadDim, .half = kHeadDim / 2, .interleaved = interleaved},
                       s);
      });
    }
    const size_t hid_floats = size_t(n) * kHidden;
    measure("swiglu", n, 3.0 * double(hid_floats) * 4, hid_floats, [&](int64_t r) {
      cuda_ops::swiglu(out + r * hid_floats, x + r * hid_floats, y + r * hid_floats, int64_t(hid_floats), s);
    });
    const cuda_ops::WeightView tv{reinterpret_cast<const uint8_t*>(table), kVocab, kDim, 0};
    const double emb_bytes = double(n) * kDim * (2 + 4) + n * 4.0;  // bf16 rows read, f32 rows written, ids
    measure("embedding_bf16", n, emb_bytes, act_floats, [&](int64_t r) {
      cuda_ops::embedding(DType::BF16, {.table = tv, .ids = ids + r * n, .out = out + r * act_floats, .n = n,
                                        .errors = nullptr}, s);
    });
    measure("embedding_bf16 seq ids", n, emb_bytes, act_floats, [&](int64_t r) {
      cuda_ops::embedding(DType::BF16, {.table = tv, .ids = seq_ids + r * n, .out = out + r * act_floats, .n = n,
                                        .errors = nullptr}, s);
    });
    // References: write only (the embedding's output bytes), and a copy of the add_rms_norm->bf16 bytes.
    measure("ref memset", n, act, act_floats, [&](int64_t r) {
      BENCH_CUDA_CHECK(cudaMemsetAsync(out + r * act_floats, 0x11, size_t(act), s));
    });
    const size_t copy_floats = size_t((3 * act + act / 2) / 2 / 4);
    measure("ref memcpy", n, double(copy_floats) * 8, copy_floats, [&](int64_t r) {
      const int64_t k = r % int64_t(kBufFloats / 2 / copy_floats);
      BENCH_CUDA_CHECK(cudaMemcpyAsync(out + r * copy_floats, copy_src + k * copy_floats, copy_floats * 4,
                                       cudaMemcpyDeviceToDevice, s));
    });
  }
  BENCH_CUDA_CHECK(cudaStreamSynchronize(s));
  return json.write(json_path) ? 0 : 1;
}
