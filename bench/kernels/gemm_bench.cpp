// Prefill GEMM harness (needs a compute capability 9.x GPU): ferry's Hopper GEMM (gemm_sm90.cuh) against
// cuBLASLt (ferry's cached-plan wrapper, same bf16 in / f32 out), measured in the same run.
//   gemm   : out (M, N) f32 = x (M, K) bf16 . w (N, K)^T on the Llama-3-8B projection shapes N x K = 6144x4096,
//            4096x4096, 28672x4096, 4096x14336 at M = 512, 1024, 2048, 4096, 8192, plus 4096^3 and 8192^3
//            (cuBLAS 754 / 779 TFLOP/s there per ../shared/GPU.md). Per row: all three tile configs, the
//            heuristic's pick, cuBLASLt, TFLOP/s and ferry (heuristic) as % of cuBLASLt.
//   matmul : CudaBackend::matmul at n = 512 / 2048 for BF16, Q8_0, Q4_0 weights: cuBLASLt path (per-call
//            dequant), Hopper GEMM with per-call dequant, Hopper GEMM with the bf16 copy made at load.
//   narrow : the shapes whose tiles leave a partial wave (qkv 6144x4096, wo 4096x4096, the TP=2 shards 3072x4096 and
//            4096x2048, down 4096x14336, gate_up 28672x4096) at M = 256, 512, 1024 (+ 2048 for the big ones): whole
//            tiles as the wave model picks them ("tiles", the path before stream-K), each tile forced whole, stream-K
//            over every SM with each tile, stream-K 128x256 over an exact multiple of its tiles (split-K), the
//            heuristic's plan ("ferry") and cuBLASLt; TFLOP/s, and ferry / tiles, ferry / cuBLASLt.
// Timing: gemm: device events around each call, median of 15 after 3 warm-up calls; narrow: the same around 5
// back-to-back calls (launch gaps overlap, as in a forward pass); matmul: host clock over 10 queued calls. Inputs
// random (never zeros).
// Usage: gemm_bench [--json FILE] [gemm|narrow|matmul]... (none: gemm and matmul).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/matmul/gemm_cublaslt.h"
#include "backends/cuda/matmul/gemm_sm90.cuh"
#include "cuda_bench.h"
#include "formats/quant.h"
#include "kernel_json.h"

namespace {

using namespace ferry;
using bench::median_ms;  // per call, median of 15 after 3 warm-up calls
using bench::random_bf16;


struct Shape {
  const char* name;
  int64_t n, k;
};
const Shape kShapes[] = {{"qkv 6144x4096", 6144, 4096},
                         {"wo 4096x4096", 4096, 4096},
                         {"gate_up 28672x4096", 28672, 4096},
                         {"down 4096x14336", 4096, 14336}};

void bench_gemm(bench::KernelJson& json) {
  std::printf("\n== gemm: out (M,N) f32 = x (M,K) bf16 . w (N,K)^T, TFLOP/s (median of 15) ==\n");
  std::printf("%-20s %5s %9s %9s %9s %5s %9s %9s %7s\n", "shape NxK", "M", "128x128", "128x192", "128x256", "pick",
              "ferry", "cuBLASLt", "% cuBLAS");
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  cuda_ops::Sm90Gemm ours(0);
  if (!ours.available()) {
    std::printf("not a compute capability 9.x device: skipped\n");
    return;
  }
  cuda_ops::CublasLtGemm lt;
  const size_t ws_bytes = size_t(32) << 20;
  void* ws = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
  const int64_t max_m = 8192, max_k = 14336, max_n = 28672;
  uint16_t* x = random_bf16(size_t(max_m) * size_t(max_k), 1);
  uint16_t* w = random_bf16(size_t(max_n) * 4096, 2);  // the largest w: 28672 x 4096 (8192^2 and 4096 x 14336 fit)
  float* out = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&out, size_t(max_m) * size_t(max_n) * 4));
  std::vector<std::pair<std::string, double>> summary;
  auto row = [&](const std::string& name, int64_t m, int64_t n, int64_t k) {
    const double flop = 2.0 * double(m) * double(n) * double(k);
    const cuda_ops::GemmTile t128 = cuda_ops::GemmTile::k128x128, t192 = cuda_ops::GemmTile::k128x192,
                             t256 = cuda_ops::GemmTile::k128x256;
    const double ms128 = median_ms(s, [&] { ours.run(out, x, w, m, n, k, s, &t128); });
    const double ms192 = median_ms(s, [&] { ours.run(out, x, w, m, n, k, s, &t192); });
    const double ms256 = median_ms(s, [&] { ours.run(out, x, w, m, n, k, s, &t256); });
    const cuda_ops::GemmPlan plan = ours.plan(m, n, k);
    const double ms_lt = median_ms(s, [&] { lt.run(out, x, w, m, n, k, ws, ws_bytes, s); });
    const double ms_ours = median_ms(s, [&] { ours.run(out, x, w, m, n, k, s); });  // heuristic, timed again
    const double tf = flop / ms_ours * 1e-9, tf_lt = flop / ms_lt * 1e-9;
    std::printf("%-20s %5ld %9.1f %9.1f %9.1f %5d %9.1f %9.1f %6.1f%%\n", name.c_str(), long(m), flop / ms128 * 1e-9,
                flop / ms192 * 1e-9, flop / ms256 * 1e-9, plan.block_n, tf, tf_lt, 100.0 * tf / tf_lt);
    const double bytes = double(m * k) * 2 + double(n * k) * 2 + double(m * n) * 4;
    json.add("gemm sm90 " + name + " M" + std::to_string(m), flop, bytes, ms_ours * 1e-3);
    json.add("gemm cublasLt " + name + " M" + std::to_string(m), flop, bytes, ms_lt * 1e-3);
    summary.emplace_back(name + " M" + std::to_string(m), 100.0 * tf / tf_lt);
  };
  for (const Shape& sh : kShapes) {
    for (const int64_t m : {512, 1024, 2048, 4096, 8192}) row(sh.name, m, sh.n, sh.k);
  }
  row("square 4096", 4096, 4096, 4096);
  row("square 8192", 8192, 8192, 8192);
  double lo = 1e9, sum = 0;
  for (const auto& [name, pct] : summary) {
    lo = std::min(lo, pct);
    sum += pct;
  }
  std::printf("ferry / cuBLASLt over %zu rows: mean %.1f%%, worst %.1f%%\n", summary.size(), sum / double(summary.size()), lo);
  BENCH_CUDA_CHECK(cudaFree(x));
  BENCH_CUDA_CHECK(cudaFree(w));
  BENCH_CUDA_CHECK(cudaFree(out));
  BENCH_CUDA_CHECK(cudaFree(ws));
  BENCH_CUDA_CHECK(cudaStreamDestroy(s));
}

void bench_narrow(bench::KernelJson& json) {
  std::printf("\n== narrow: out (M,N) f32 = x (M,K) bf16 . w (N,K)^T, TFLOP/s (median of 15 x 5 back-to-back calls) ==\n");
  std::printf("%-19s %5s %7s %6s %6s %6s %6s %6s %6s %8s %12s %6s %7s %7s %7s\n", "shape NxK", "M", "tiles", "t128",
              "t192", "t256", "sk128", "sk192", "sk256", "split256", "ferry(plan)", "us", "cuBLAS", "/tiles", "/cuBLAS");
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  cuda_ops::Sm90Gemm ours(0);
  if (!ours.available()) {
    std::printf("not a compute capability 9.x device: skipped\n");
    return;
  }
  const int sms = ours.num_sms();
  cuda_ops::CublasLtGemm lt;
  const size_t ws_bytes = size_t(32) << 20;
  void* ws = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
  const int64_t max_m = 2048, max_k = 14336, max_n = 28672;
  uint16_t* x = random_bf16(size_t(max_m) * size_t(max_k), 1);
  uint16_t* w = random_bf16(size_t(max_n) * 4096, 2);  // 28672 x 4096 holds 4096 x 14336 too
  float* out = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&out, size_t(max_m) * size_t(max_n) * 4));
  const auto ms_of = [&](auto&& f) { return median_ms(s, f, 15, 5); };
  const Shape shapes[] = {{"qkv 6144x4096", 6144, 4096},        {"wo 4096x4096", 4096, 4096},
                          {"tp2 qkv 3072x4096", 3072, 4096},    {"tp2 wo 4096x2048", 4096, 2048},
                          {"down 4096x14336", 4096, 14336},     {"gate_up 28672x4096", 28672, 4096}};
  using cuda_ops::GemmTile;
  for (const Shape& sh : shapes) {
    const bool big = sh.n * sh.k > 4096 * 8192;
    for (const int64_t m : {256, 512, 1024, 2048}) {
      if (m == 2048 && !big) continue;
      const int64_t n = sh.n, k = sh.k;
      const double flop = 2.0 * double(m) * double(n) * double(k);
      const auto tf = [&](double ms) { return flop / ms * 1e-9; };
      const cuda_ops::GemmPlan old = cuda_ops::make_tile_plan(m, n, sms);
      const GemmTile tiles[3] = {GemmTile::k128x128, GemmTile::k128x192, GemmTile::k128x256};
      double whole[3], sk[3];
      for (int i = 0; i < 3; ++i) {
        whole[i] = ms_of([&] { ours.run(out, x, w, m, n, k, s, &tiles[i]); });
        sk[i] = ms_of([&] { ours.run(out, x, w, m, n, k, s, &tiles[i], sms); });
      }
      const double ms_old = whole[old.tile == GemmTile::k128x128 ? 0 : old.tile == GemmTile::k128x192 ? 1 : 2];
      const int64_t t256 = cuda_ops::gemm_tiles(m, n, 256);
      const int64_t split = t256 > 0 ? sms / t256 : 0;  // split-K: every tile cut into `split` equal k ranges
      double ms_split = 0;
      if (split >= 2) ms_split = ms_of([&] { ours.run(out, x, w, m, n, k, s, &tiles[2], int(split * t256)); });
      const cuda_ops::GemmPlan plan = ours.plan(m, n, k);
      const double ms_ours = ms_of([&] { ours.run(out, x, w, m, n, k, s); });
      const double ms_lt = ms_of([&] { lt.run(out, x, w, m, n, k, ws, ws_bytes, s); });
      char split_txt[32], plan_txt[32];
      std::snprintf(split_txt, sizeof split_txt, split >= 2 ? "%.1f/%ld" : "-", split >= 2 ? tf(ms_split) : 0.0,
                    long(split));
      std::snprintf(plan_txt, sizeof plan_txt, "%.1f %d%s", tf(ms_ours), plan.block_n, plan.stream_k ? "sk" : "");
      std::printf("%-19s %5ld %7.1f %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f %8s %12s %6.1f %7.1f %7.3f %7.3f\n", sh.name,
                  long(m), tf(ms_old), tf(whole[0]), tf(whole[1]), tf(whole[2]), tf(sk[0]), tf(sk[1]), tf(sk[2]),
                  split_txt, plan_txt, ms_ours * 1e3, tf(ms_lt), ms_old / ms_ours, ms_lt / ms_ours);
      const double bytes = double(m * k) * 2 + double(n * k) * 2 + double(m * n) * 4;
      const std::string tag = std::string(sh.name) + " M" + std::to_string(m);
      json.add("narrow sm90 plan " + tag, flop, bytes, ms_ours * 1e-3);
      json.add("narrow sm90 tiles " + tag, flop, bytes, ms_old * 1e-3);
      json.add("narrow sm90 sk256 " + tag, flop, bytes, sk[2] * 1e-3);
      json.add("narrow cublasLt " + tag, flop, bytes, ms_lt * 1e-3);
    }
  }
  BENCH_CUDA_CHECK(cudaFree(x));
  BENCH_CUDA_CHECK(cudaFree(w));
  BENCH_CUDA_CHECK(cudaFree(out));
  BENCH_CUDA_CHECK(cudaFree(ws));
  BENCH_CUDA_CHECK(cudaStreamDestroy(s));
}

void bench_matmul(bench::KernelJson& json) {
  std::printf("\n== CudaBackend::matmul (f32 activations in, f32 out), ms per call (median of 9 x 10 calls) ==\n");
  std::printf("%-20s %5s %5s %10s %10s %10s %8s\n", "shape NxK", "n", "type", "cuBLASLt", "sm90", "sm90+copy",
              "TFLOP/s");
  CudaBackend be_lt(CudaBackendOptions{.device_index = 0, .prefill_bf16_weights = false, .tune = {.gemm = GemmTune::kCublas}});
  CudaBackend be_h(CudaBackendOptions{.device_index = 0, .prefill_bf16_weights = false});
  CudaBackend be_hc(CudaBackendOptions{.device_index = 0, .prefill_bf16_weights = true});
  for (const Shape& sh : kShapes) {
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0, 0.5f);
    std::vector<float> wf(size_t(sh.n * sh.k));
    for (float& v : wf) v = dist(rng);
    for (const DType t : {DType::BF16, DType::Q8_0, DType::Q4_0}) {
      std::vector<uint8_t> wq(size_t(sh.n) * row_bytes(t, sh.k));
      for (int64_t r = 0; r < sh.n; ++r) quantize_row(t, wf.data() + r * sh.k, wq.data() + size_t(r) * row_bytes(t, sh.k), sh.k);
      for (const int64_t n : {512, 2048}) {
        double ms[3];
        CudaBackend* bes[3] = {&be_lt, &be_h, &be_hc};
        std::vector<float> xh = std::vector<float>(size_t(n * sh.k));
        for (float& v : xh) v = dist(rng);
        for (int b = 0; b < 3; ++b) {
          CudaBackend& be = *bes[b];
          std::vector<DeviceBuffer> keep;
          const Tensor w = be.prepare_weight(Tensor::make(t, {sh.n, sh.k}, wq.data()), keep);
          keep.push_back(be.alloc(xh.size() * 4));
          const Tensor x = Tensor::make(DType::F32, {n, sh.k}, keep.back().data(), Device::Cuda);
          be.copy_to_device(x, xh.data(), xh.size() * 4);
          keep.push_back(be.alloc(size_t(n * sh.n) * 4));
          const Tensor out = Tensor::make(DType::F32, {n, sh.n}, keep.back().data(), Device::Cuda);
          be.synchronize();
          // The backend runs on its own stream: a host clock around 10 queued calls and a synchronize (launch
          // costs overlap the device work, as in a forward pass), median of 9 such samples after 2 warm-ups.
          std::vector<double> t;
          for (int i = 0; i < 11; ++i) {
            be.synchronize();
            const auto t0 = std::chrono::steady_clock::now();
            for (int j = 0; j < 10; ++j) be.matmul(out, x, w, Tensor{});
            be.synchronize();
            if (i >= 2) t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 10);
          }
          std::sort(t.begin(), t.end());
          ms[b] = t[t.size() / 2];
        }
        const double flop = 2.0 * double(n) * double(sh.n) * double(sh.k);
        std::printf("%-20s %5ld %5s %10.3f %10.3f %10.3f %8.1f\n", sh.name, long(n), std::string(dtype_name(t)).c_str(),
                    ms[0], ms[1], ms[2], flop / std::min(ms[1], ms[2]) * 1e-9);
        const double bytes = double(wq.size()) + double(n) * double(sh.k + sh.n) * 4;
        const std::string tag = std::string(dtype_name(t)) + " " + sh.name + " n" + std::to_string(n);
        json.add("matmul cublasLt " + tag, flop, bytes, ms[0] * 1e-3);
        json.add("matmul sm90 " + tag, flop, bytes, ms[1] * 1e-3);
        if (t != DType::BF16) json.add("matmul sm90 bf16-copy " + tag, flop, bytes, ms[2] * 1e-3);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  std::vector<std::string> sections;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "gemm" || a == "narrow" || a == "matmul") {
      sections.push_back(a);
    } else {
      std::fprintf(stderr, "usage: gemm_bench [--json FILE] [gemm|narrow|matmul]...\n");
      return 2;
    }
  }
  if (sections.empty()) sections = {"gemm", "matmul"};
  cudaDeviceProp prop{};
  if (!bench::report_device(prop)) return 1;
  bench::KernelJson json;
  try {
    for (const std::string& sec : sections) {
      if (sec == "gemm") bench_gemm(json);
      if (sec == "narrow") bench_narrow(json);
      if (sec == "matmul") bench_matmul(json);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return json.write(json_path) ? 0 : 1;
}
