// The decode matvec kernels on the GPU: for each weight type, shape (rows x cols) and token count M, the time
// per call (CUDA events around batches of 20 back-to-back calls, median of 15 batches after 5 warm-up calls;
// the calls rotate over enough copies of the weight (>= 150 MB in all) that none is still in the 60 MB L2,
// as in a decode step where every layer has its own weights), the weight bytes per second, their share of the
// 4.30 TB/s copy roofline (GPU.md), and cuBLAS bf16 (cublasGemmEx, fp32 accumulation) on the same shape and M
// measured in the same run: its time, GB/s of its bf16 weight, and "vs cuBLAS" = cuBLAS time / ferry time
// (> 1: ferry faster). Weights: 64 random rows, quantized on the host and repeated (speed does not depend on
// the values). Every (type, shape, M) runs each kernel that takes it (MatvecParams::kernel, matvec.cuh: rows =
// staged activations first, one block per 16 rows; tiled = persistent blocks, tensor cores for BF16 M >= 2, dp4a for
// the quantized types, its activation pre-pass included in the time; stream_half / stream_quant = the one-token
// streamed kernels), "vs rows" = the rows kernel's time / this kernel's time (> 1: faster), and every row ends with
// its relative L2 against the rows kernel ("MISMATCH" above 1e-4). Retired kernels: docs/perf-log.md.
// Usage: matvec_bench [--quick] [--hot] [--stacked] [--types T1,T2,..] [--json FILE] (quick: M = 1 only; hot: no
// rotation over weight copies, so weights up to ~50 MB are read from L2 (the consumers' own rate); --stacked: only the
// mixed-type q|k|v comparison (stacked_bench); --types: only these weight
// types, by dtype name, e.g. bf16,q8_0,q4_0,q4_K;
// --json: every row as {name, flops, bytes, seconds} for `ferry bench --plot --kernels`, bench/kernels/kernel_json.h;
// bytes there = weight + activations read + outputs written).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/matmul/stream_quant.cuh"
#include "backends/cuda/matmul/weight_layout.cuh"
#include "cuda_bench.h"
#include "formats/quant.h"
#include "kernel_json.h"

namespace {

using namespace ferry;
constexpr double kRoofline = bench::kCopyBytesPerSecond;

std::vector<uint8_t> random_weight(DType t, int64_t rows, int64_t cols) {
  constexpr int64_t kDistinct = 64;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> w(size_t(rows) * rb);
  std::vector<float> f(static_cast<size_t>(cols));
  for (int64_t r = 0; r < std::min(rows, kDistinct); ++r) {
    for (float& v : f) v = dist(rng);
    quantize_row(t, f.data(), w.data() + size_t(r) * rb, cols);
  }
  for (int64_t r = kDistinct; r < rows; ++r) std::memcpy(w.data() + size_t(r) * rb, w.data() + size_t(r % kDistinct) * rb, rb);
  return w;
}

// Median time per call of launch(i) (i = the call's index, for rotating over weight copies).
template <class F>
double median_us(cudaStream_t s, F&& launch) {
  constexpr int kBatch = 20, kSamples = 15;
  cudaEvent_t a, b;
  BENCH_CUDA_CHECK(cudaEventCreate(&a));
  BENCH_CUDA_CHECK(cudaEventCreate(&b));
  int call = 0;
  for (int i = 0; i < 5; ++i) launch(call++);
  std::vector<float> ms;
  for (int i = 0; i < kSamples; ++i) {
    BENCH_CUDA_CHECK(cudaEventRecord(a, s));
    for (int j = 0; j < kBatch; ++j) launch(call++);
    BENCH_CUDA_CHECK(cudaEventRecord(b, s));
    BENCH_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / kBatch);
  }
  std::sort(ms.begin(), ms.end());
  BENCH_CUDA_CHECK(cudaEventDestroy(a));
  BENCH_CUDA_CHECK(cudaEventDestroy(b));
  return double(ms[ms.size() / 2]) * 1e3;
}

// Device copies of `bytes` at src (the first is src itself) so that the copies together hold >= 150 MB; with hot,
// src alone (every call reads the same weight: from L2 where it fits, so a kernel's figure above the HBM roofline
// is its consumers' own rate).
std::vector<void*> l2_copies(const void* src, size_t bytes, bool hot) {
  const size_t n = hot ? 1 : std::max<size_t>(1, (size_t(150) << 20) / bytes + 1);
  std::vector<void*> v{const_cast<void*>(src)};
  for (size_t i = 1; i < n; ++i) {
    void* d = nullptr;
    BENCH_CUDA_CHECK(cudaMalloc(&d, bytes));
    BENCH_CUDA_CHECK(cudaMemcpy(d, src, bytes, cudaMemcpyDeviceToDevice));
    v.push_back(d);
  }
  return v;
}
void free_copies(std::vector<void*>& v) {
  for (size_t i = 1; i < v.size(); ++i) BENCH_CUDA_CHECK(cudaFree(v[i]));
  v.clear();
}

// --stacked: the q|k|v of the Llama-3-8B shape's mixed layers at M = 1 (q 4096 and k 1024 rows in Q4_K or Q5_K, v
// 1024 rows in Q6_K, 4096 columns): the three single-type stream_quant launches back to back (today's unfused
// layer, minus its norm and epilogue launches) against the one stream_quant_stacked launch over the same bytes
// (rotated over copies as above), with whether the two give the same bits (they should: stream_quant.cuh).
void stacked_bench(CudaBackend& backend, cudaStream_t s, const float* x, float* out, bool hot,
                   ferry::bench::KernelJson& json) {
  constexpr int64_t cols = 4096, q_rows = 4096, kv_rows = 1024;
  const auto view = [](DType t, const Tensor& w) {
    return cuda_ops::WeightView{static_cast<const uint8_t*>(w.data), w.rows(), w.cols(),
                                cuda_ops::is_split_type(t) ? cuda_ops::scales_offset(t, w.rows(), w.cols()) : 0};
  };
  for (const DType head : {DType::Q4_K, DType::Q5_K}) {
    std::vector<DeviceBuffer> keep;
    const std::vector<uint8_t> hq = random_weight(head, q_rows + kv_rows, cols), hv = random_weight(DType::Q6_K, kv_rows, cols);
    // qk: (5120, 4096) the head type (q's rows then k's); v: (1024, 4096) Q6_K
    const Tensor qk = backend.prepare_weight(Tensor::make(head, {q_rows + kv_rows, cols}, const_cast<uint8_t*>(hq.data())), keep);
    const Tensor v = backend.prepare_weight(Tensor::make(DType::Q6_K, {kv_rows, cols}, const_cast<uint8_t*>(hv.data())), keep);
    backend.synchronize();
    const size_t qk_bytes = cuda_ops::prepared_bytes(head, q_rows + kv_rows, cols);
    const size_t v_bytes = cuda_ops::prepared_bytes(DType::Q6_K, kv_rows, cols);
    std::vector<void*> qk_copies = l2_copies(qk.data, qk_bytes, hot), v_copies = l2_copies(v.data, v_bytes, hot);
    const auto views = [&](int call) {
      cuda_ops::WeightView a = view(head, qk), b = view(DType::Q6_K, v);
      a.data = static_cast<const uint8_t*>(qk_copies[size_t(call) % qk_copies.size()]);
      b.data = static_cast<const uint8_t*>(v_copies[size_t(call) % v_copies.size()]);
      return std::pair{a, b};
    };
    const auto separate = [&](int call) {
      auto [a, b] = views(call);
      cuda_ops::WeightView q = a, k = a;
      q.rows = q_rows;
      k.rows = kv_rows;
      k.data = a.data + cuda_ops::prepared_bytes(head, q_rows, cols);  // Q4_K/Q5_K rows are contiguous super-blocks
      const cuda_ops::MatvecParams p{.w = q, .x = x, .bias = nullptr, .out = out, .n_tokens = 1,
                                     .kernel = cuda_ops::MatvecKernel::kStreamQuant, .one_level_acts = true};
      cuda_ops::matvec(head, p, s);
      cuda_ops::MatvecParams pk = p, pv = p;
      pk.w = k;
      pk.out = out + q_rows;
      pv.w = b;
      pv.out = out + q_rows + kv_rows;
      cuda_ops::matvec(head, pk, s);
      cuda_ops::matvec(DType::Q6_K, pv, s);
    };
    const auto stacked = [&](int call) {
      auto [a, b] = views(call);
      cuda_ops::stream_quant_stacked(head, DType::Q6_K,
                                     {.w = a, .x = x, .bias = nullptr, .out = out, .n_tokens = 1,
                                      .kernel = cuda_ops::MatvecKernel::kStreamQuant, .one_level_acts = true},
                                     b, s);
    };
    std::vector<float> r1(size_t(q_rows + 2 * kv_rows)), r2(r1.size());
    separate(0);
    BENCH_CUDA_CHECK(cudaMemcpyAsync(r1.data(), out, r1.size() * 4, cudaMemcpyDeviceToHost, s));
    stacked(0);
    BENCH_CUDA_CHECK(cudaMemcpyAsync(r2.data(), out, r2.size() * 4, cudaMemcpyDeviceToHost, s));
    BENCH_CUDA_CHECK(cudaStreamSynchronize(s));
    const bool same = std::memcmp(r1.data(), r2.data(), r1.size() * 4) == 0;
    const double bytes = double(qk_bytes + v_bytes);
    for (const bool one : {false, true}) {
      const double us = one ? median_us(s, stacked) : median_us(s, separate);
      const double gbs = bytes / (us * 1e-6) / 1e9;
      const std::string name = std::string(dtype_name(head)) + "+q6_K q|k|v 6144x4096 M1 " +
                               (one ? "stream_quant_stacked" : "stream_quant x3");
      json.add(name, 2.0 * 6144 * 4096, bytes + double(cols + 6144) * 4, us * 1e-6);
      std::printf("%-44s %9.2f us %8.0f GB/s %5.1f%% of roof%s\n", name.c_str(), us, gbs, 100.0 * gbs * 1e9 / kRoofline,
                  one ? (same ? "  same bits as x3" : "  DIFFERENT BITS from x3") : "");
      std::fflush(stdout);
    }
    free_copies(qk_copies);
    free_copies(v_copies);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, hot = false, stacked_only = false;
  std::string json_path, types_filter;  // types_filter: ",T1,T2,", empty = every type
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--hot") {
      hot = true;
    } else if (arg == "--stacked") {
      stacked_only = true;
    } else if (arg == "--json" && a + 1 < argc) {
      json_path = argv[++a];
    } else if (arg == "--types" && a + 1 < argc) {
      types_filter = "," + std::string(argv[++a]) + ",";
    } else {
      std::fprintf(stderr, "usage: matvec_bench [--quick] [--hot] [--stacked] [--types T1,T2,..] [--json FILE]\n");
      return 2;
    }
  }
  ferry::bench::KernelJson json;
  CudaBackend backend;
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasSetStream(h, s);
  std::vector<int> ms = quick ? std::vector<int>{1} : std::vector<int>{1, 2, 4, 8, 16};
  struct Shape { int64_t rows, cols; };
  const Shape shapes[] = {{14336, 4096}, {4096, 14336}, {4096, 4096}, {6144, 4096}, {1024, 4096}, {28672, 4096},
                          {128256, 4096}, {3072, 4096}, {4096, 2048}, {4096, 7168}};  // last 3: TP=2 halves
  float* x = nullptr;
  float* out = nullptr;
  uint16_t* xb = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&x, 16 * 14336 * 4));
  BENCH_CUDA_CHECK(cudaMalloc(&xb, 16 * 14336 * 2));
  BENCH_CUDA_CHECK(cudaMalloc(&out, size_t(16) * 128256 * 4));
  void* scratch = nullptr;  // the tiled kernel's activation scratch (quantized weights)
  BENCH_CUDA_CHECK(cudaMalloc(&scratch, cuda_ops::matvec_scratch_bytes(DType::Q4_0, cuda_ops::MatvecKernel::kTiled, 16, 14336)));
  {
    std::vector<float> hx(16 * 14336);
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (float& v : hx) v = d(rng);
    BENCH_CUDA_CHECK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA_CHECK(cudaMemset(xb, 0x3c, 16 * 14336 * 2));
  }
  if (stacked_only) {
    stacked_bench(backend, s, x, out, hot, json);
    cublasDestroy(h);
    return json.write(json_path) ? 0 : 1;
  }
  std::printf("%-6s %-13s %3s %-12s %9s %8s %6s | %9s %8s %9s | %6s\n", "type", "rows x cols", "M", "kernel", "us", "GB/s",
              "%roof", "cuBLAS us", "GB/s", "vs cuBLAS", "vs rows");
  std::fflush(stdout);
  for (const Shape sh : shapes) {
    // cuBLAS bf16 reference on the same shape: out (M, rows) = x (M, cols) · Wᵀ.
    const std::vector<uint8_t> wb = random_weight(DType::BF16, sh.rows, sh.cols);
    void* wbd = nullptr;
    BENCH_CUDA_CHECK(cudaMalloc(&wbd, wb.size()));
    BENCH_CUDA_CHECK(cudaMemcpy(wbd, wb.data(), wb.size(), cudaMemcpyHostToDevice));
    std::vector<double> cublas_us;
    std::vector<void*> wcopies = l2_copies(wbd, wb.size(), hot);
    for (const int m : ms) {
      const float alpha = 1.0f, beta = 0.0f;
      cublas_us.push_back(median_us(s, [&](int call) {
        // Column-major view: W is (cols, rows) col-major = row-major (rows, cols); C (rows, M) = Wᵀ · X.
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(sh.rows), m, int(sh.cols), &alpha,
                     wcopies[size_t(call) % wcopies.size()], CUDA_R_16BF, int(sh.cols), xb, CUDA_R_16BF,
                     int(sh.cols), &beta, out, CUDA_R_32F, int(sh.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      }));
    }
    free_copies(wcopies);
    BENCH_CUDA_CHECK(cudaFree(wbd));
    for (size_t i = 0; i < ms.size(); ++i)
      json.add("cuBLAS BF16 " + std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " M" + std::to_string(ms[i]),
               2.0 * ms[i] * double(sh.rows) * double(sh.cols),
               double(sh.rows) * double(sh.cols) * 2 + double(ms[i]) * (double(sh.cols) * 2 + double(sh.rows) * 4),
               cublas_us[i] * 1e-6);
    for (const DType t : {DType::BF16, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K}) {
      if (sh.rows == 128256 && t != DType::Q4_0 && t != DType::Q8_0 && t != DType::BF16) continue;
      if (!types_filter.empty() && types_filter.find("," + std::string(dtype_name(t)) + ",") == std::string::npos)
        continue;
      const std::vector<uint8_t> hw = random_weight(t, sh.rows, sh.cols);
      std::vector<DeviceBuffer> keep;
      const Tensor w = backend.prepare_weight(Tensor::make(t, {sh.rows, sh.cols}, const_cast<uint8_t*>(hw.data())), keep);
      backend.synchronize();
      const cuda_ops::WeightView view{static_cast<const uint8_t*>(w.data), sh.rows, sh.cols,
                                      (t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1)
                                          ? cuda_ops::scales_offset(t, sh.rows, sh.cols) : 0};
      const double bytes = double(cuda_ops::prepared_bytes(t, sh.rows, sh.cols));
      std::vector<void*> copies = l2_copies(w.data, cuda_ops::prepared_bytes(t, sh.rows, sh.cols), hot);
      const auto view_of = [&](int call) {
        cuda_ops::WeightView v = view;
        v.data = static_cast<const uint8_t*>(copies[size_t(call) % copies.size()]);
        return v;
      };
      for (size_t i = 0; i < ms.size(); ++i) {
        const int m = ms[i];
        // Every kernel that takes this shape against the rows kernel: relative L2, printed on their rows.
        std::vector<cuda_ops::MatvecKernel> kVersions;
        for (const cuda_ops::MatvecKernel k :
             {cuda_ops::MatvecKernel::kRowBlocks, cuda_ops::MatvecKernel::kTiled, cuda_ops::MatvecKernel::kStreamHalf,
              cuda_ops::MatvecKernel::kStreamQuant})
          if (cuda_ops::matvec_kernel_applies(k, t, m, sh.rows, sh.cols)) kVersions.push_back(k);
        const int kN = int(kVersions.size());
        std::vector<std::vector<float>> res(static_cast<size_t>(kN));
        for (int k = 0; k < kN; ++k) {
          cuda_ops::matvec(t, {.w = view, .x = x, .bias = nullptr, .out = out, .n_tokens = m, .kernel = kVersions[k],
                               .scratch = scratch},
                           s);
          res[size_t(k)].resize(size_t(m) * size_t(sh.rows));
          BENCH_CUDA_CHECK(cudaMemcpyAsync(res[size_t(k)].data(), out, res[size_t(k)].size() * 4, cudaMemcpyDeviceToHost, s));
          BENCH_CUDA_CHECK(cudaStreamSynchronize(s));
        }
        std::vector<std::array<char, 64>> note(static_cast<size_t>(kN), std::array<char, 64>{});
        for (int k = 1; k < kN; ++k) {
          double num = 0, den = 0;
          for (size_t j = 0; j < res[0].size(); ++j) {
            num += double(res[size_t(k)][j] - res[0][j]) * double(res[size_t(k)][j] - res[0][j]);
            den += double(res[0][j]) * double(res[0][j]);
          }
          const double diff = std::sqrt(num / den), bound = 1e-4;
          std::snprintf(note[size_t(k)].data(), note[size_t(k)].size(), "%s-rows rel L2 %.1e%s",
                        cuda_ops::matvec_kernel_name(kVersions[k]), diff,
                        diff <= bound ? "" : " MISMATCH");
        }
        double v2_us = 0;
        for (int k = 0; k < kN; ++k) {
          const cuda_ops::MatvecKernel version = kVersions[k];
          const double us = median_us(s, [&](int call) {
            cuda_ops::matvec(t, {.w = view_of(call), .x = x, .bias = nullptr, .out = out, .n_tokens = m,
                                 .kernel = version, .scratch = scratch},
                             s);
          });
          if (version == cuda_ops::MatvecKernel::kRowBlocks) v2_us = us;
          const double io_bytes = double(m) * double(sh.cols + sh.rows) * 4;  // f32 activations in, outputs out
          json.add(std::string(dtype_name(t)) + " matvec " + std::to_string(sh.rows) + "x" + std::to_string(sh.cols) +
                       " M" + std::to_string(m) + " " + cuda_ops::matvec_kernel_name(version),
                   2.0 * m * double(sh.rows) * double(sh.cols), bytes + io_bytes, us * 1e-6);
          const double gbs = bytes / (us * 1e-6) / 1e9;
          const double cgbs = double(sh.rows) * double(sh.cols) * 2 / (cublas_us[i] * 1e-6) / 1e9;
          std::printf("%-6s %6lldx%-6lld %3d %-12s %9.2f %8.0f %5.1f%% | %9.2f %8.0f %8.2fx | %5.2fx %s\n",
                      std::string(dtype_name(t)).c_str(), (long long)sh.rows, (long long)sh.cols, m, cuda_ops::matvec_kernel_name(version), us, gbs,
                      100.0 * gbs * 1e9 / kRoofline, cublas_us[i], cgbs, cublas_us[i] / us, v2_us / us,
                      note[size_t(k)].data());
          std::fflush(stdout);
        }
      }
      free_copies(copies);
    }
  }
  BENCH_CUDA_CHECK(cudaStreamSynchronize(s));
  cublasDestroy(h);
  return json.write(json_path) ? 0 : 1;
}
