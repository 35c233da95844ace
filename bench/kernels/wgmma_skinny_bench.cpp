// wgmma skinny GEMM harness (needs a compute capability 9.x GPU): ferry's wgmma skinny GEMM (skinny_wgmma.cuh)
// against cuBLASLt (ferry's cached-plan wrapper, same bf16 in / f32 out), the mma.sync skinny GEMM
// (skinny_mma.cuh, n <= 128) and the Hopper GEMM (gemm_sm90.cuh), all measured in the same run.
//   out (n, rows) f32 = x (n, k) bf16 . w (rows, k)^T on the Llama-3-8B projections 6144x4096, 4096x4096,
//   28672x4096, 4096x14336, 128256x4096 and their TP=2 halves 3072x4096, 4096x2048, 14336x4096, 4096x7168, at
//   n = 32, 48, 56, 64, 96, 128, 192, 255. Per row: % of 4.30 TB/s (bytes: weight + x + out, each once) of
//   cuBLASLt, the skinny GEMM's plan, the Hopper GEMM, the wgmma skinny plan and the best of its sweep (tiles
//   k128x1 / k128x2 / k256 x splits 1, 2, 3, 4, 6, 8); the plan's and the best's speed-up over cuBLASLt; the
//   plan's output against cuBLASLt's (relative L2). (A persistent schedule lost: docs/perf-log.md.)
// Weights rotate over copies filling >= 1 GiB, so every call streams its weight from HBM (as in a decode step,
// where the other layers' weights evict it from the 60 MB L2); x stays in L2 (it was just written).
// Timing: device events around 10 back-to-back calls on one stream (PDL lets the skinny kernels' weight
// prologue overlap the previous call, as in the model's stream), median of 15 after 3 warm-up batches.
// Usage: wgmma_skinny_bench [--json FILE] [--sweep FILE] [--quick]
//   --sweep FILE: every (shape, n, tile, splits) time, one line each (for the plan's heuristic).
//   --quick: n = 64, 128, 255.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/matmul/gemm_cublaslt.h"
#include "backends/cuda/matmul/gemm_sm90.cuh"
#include "backends/cuda/matmul/skinny_mma.cuh"
#include "backends/cuda/matmul/skinny_wgmma.cuh"
#include "cuda_bench.h"
#include "kernel_json.h"

namespace {

using namespace ferry;
using bench::median_ms;
using bench::random_bf16;

using bench::rel_l2;
using Shape = bench::ProjectionShape;
constexpr const auto& kShapes = bench::kLlama3ProjectionShapes;

const char* tile_name(cuda_ops::WgSkinnyTile t) {
  return t == cuda_ops::WgSkinnyTile::k128x1 ? "1x" : t == cuda_ops::WgSkinnyTile::k128x2 ? "2x" : "256";
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, sweep_path;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "--sweep" && i + 1 < argc) {
      sweep_path = argv[++i];
    } else if (a == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: wgmma_skinny_bench [--json FILE] [--sweep FILE] [--quick]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  if (!bench::report_device(prop)) return 1;
  if (prop.major != 9) {
    std::printf("not a compute capability 9.x device: skipped\n");
    return 0;
  }
  const int sms = prop.multiProcessorCount;
  FILE* sweep = sweep_path.empty() ? nullptr : std::fopen(sweep_path.c_str(), "w");
  bench::KernelJson json;
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  cuda_ops::CublasLtGemm lt;
  const cuda_ops::WgSkinnyGemm wg(0);
  const cuda_ops::Sm90Gemm hopper(0);
  if (!wg.available() || !hopper.available()) {
    std::fprintf(stderr, "the wgmma kernels are not available on this device\n");
    return 1;
  }
  const size_t ws_bytes = size_t(32) << 20;
  void* ws = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
  const size_t pool_values = size_t(128256) * 4096 + (size_t(64) << 20);  // >= 1 GiB of bf16 and the lm head
  uint16_t* pool = random_bf16(pool_values, 2);
  const int64_t max_n = 256, max_k = 14336, max_rows = 128256;
  uint16_t* x = random_bf16(size_t(max_n * max_k), 1);
  float* out = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&out, size_t(max_n * max_rows) * 4));
  // Blocks of one wave per instance and cluster size (clusters must fit in one GPC): row tiles x splits above
  // this runs in more than one wave.
  std::printf("resident blocks (max active clusters x splits) at splits 1 / 2 / 4 / 8, 4096 x 4096:\n");
  for (const int64_t n : {64, 128, 192, 255}) {
    for (const cuda_ops::WgSkinnyTile t : {cuda_ops::WgSkinnyTile::k128x1, cuda_ops::WgSkinnyTile::k128x2,
                                           cuda_ops::WgSkinnyTile::k256}) {
      if (n > cuda_ops::wg_skinny_tile_max_tokens(t)) continue;
      std::printf("  n=%3ld tile %-3s:", long(n), tile_name(t));
      for (const int sp : {1, 2, 4, 8}) {
        const cuda_ops::WgSkinnyPlan p = cuda_ops::make_wg_skinny_plan(n, 4096, 4096, sms, &t, sp);
        std::printf(" %4d", wg.max_active_clusters(n, p) * sp);
      }
      std::printf("\n");
    }
  }
  std::printf("\n== out (n, rows) f32 = x (n, k) bf16 . w (rows, k)^T; %% of 4.30 TB/s (weight + x + out bytes) ==\n");
  std::printf("%-11s %6s %5s %3s | %7s %5s | %5s %5s | %7s %5s %-6s | %5s %-6s | %5s %5s | %7s\n", "shape", "rows",
              "k", "n", "cuBLAS", "%roof", "skiny", "sm90", "wg us", "%roof", "plan", "%best", "best", "xplan", "xbest",
              "relL2");
  const cuda_ops::WgSkinnyTile tiles[3] = {cuda_ops::WgSkinnyTile::k128x1, cuda_ops::WgSkinnyTile::k128x2,
                                           cuda_ops::WgSkinnyTile::k256};
  std::vector<double> plan_ratio, best_ratio;
  const std::vector<int64_t> ns =
      quick ? std::vector<int64_t>{64, 128, 255} : std::vector<int64_t>{32, 48, 56, 64, 96, 128, 192, 255};
  for (const Shape& sh : kShapes) {
    const size_t w_values = size_t(sh.rows * sh.k);
    const size_t copies = std::max<size_t>(1, pool_values / w_values);
    for (const int64_t n : ns) {
      size_t next = 0;
      auto weight = [&] { return pool + (next++ % copies) * w_values; };
      const double bytes = double(w_values) * 2 + double(n * sh.k) * 2 + double(n * sh.rows) * 4;
      const double flop = 2.0 * double(n) * double(sh.rows) * double(sh.k);
      const auto pct = [&](double ms) { return 100.0 * bytes / (ms * 1e-3) / bench::kCopyBytesPerSecond; };
      const double ms_lt = median_ms(s, [&] { lt.run(out, x, weight(), n, sh.rows, sh.k, ws, ws_bytes, s); }, 15, 10);
      std::vector<float> ref(size_t(n * sh.rows)), got(ref.size());
      lt.run(out, x, pool, n, sh.rows, sh.k, ws, ws_bytes, s);
      BENCH_CUDA_CHECK(cudaMemcpyAsync(ref.data(), out, ref.size() * 4, cudaMemcpyDeviceToHost, s));
      BENCH_CUDA_CHECK(cudaStreamSynchronize(s));

      double ms_skinny = 0;
      if (cuda_ops::skinny_gemm_supports(n, sh.rows, sh.k)) {
        const cuda_ops::SkinnyPlan sp = cuda_ops::make_skinny_plan(n, sh.rows, sh.k, sms);
        ms_skinny = median_ms(s, [&] {
          cuda_ops::skinny_gemm({.out = out, .x = x, .w = weight(), .n = n, .rows = sh.rows, .k = sh.k}, sp, s);
        }, 15, 10);
      }
      const double ms_sm90 = median_ms(s, [&] { hopper.run(out, x, weight(), n, sh.rows, sh.k, s); }, 15, 10);

      const auto time_plan = [&](const cuda_ops::WgSkinnyPlan& plan) {
        return median_ms(s, [&] {
          wg.run({.out = out, .x = x, .w = weight(), .n = n, .rows = sh.rows, .k = sh.k}, plan, s);
        }, 15, 10);
      };
      const cuda_ops::WgSkinnyPlan plan = cuda_ops::make_wg_skinny_plan(n, sh.rows, sh.k, sms);
      const double ms_plan = time_plan(plan);
      BENCH_CUDA_CHECK(cudaMemsetAsync(out, 0xFF, got.size() * 4, s));
      wg.run({.out = out, .x = x, .w = pool, .n = n, .rows = sh.rows, .k = sh.k}, plan, s);
      BENCH_CUDA_CHECK(cudaMemcpyAsync(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost, s));
      BENCH_CUDA_CHECK(cudaStreamSynchronize(s));
      const double err = rel_l2(got, ref);

      double ms_best = ms_plan;
      std::string best = "plan";
      for (const cuda_ops::WgSkinnyTile t : tiles) {
        if (n > cuda_ops::wg_skinny_tile_max_tokens(t)) continue;
        for (const int sp : {1, 2, 3, 4, 6, 8}) {
          const cuda_ops::WgSkinnyPlan p = cuda_ops::make_wg_skinny_plan(n, sh.rows, sh.k, sms, &t, sp);
          if (p.splits != sp) continue;  // k too short for that many splits
          const double ms = time_plan(p);
          if (sweep) {
            std::fprintf(sweep, "%s %ld %ld n=%ld tile=%s splits=%d blocks=%ld us=%.2f pct=%.1f\n", sh.name,
                         long(sh.rows), long(sh.k), long(n), tile_name(t), sp, long(p.row_tiles) * sp, ms * 1e3,
                         pct(ms));
          }
          if (ms < ms_best) {
            ms_best = ms;
            best = std::string(tile_name(t)) + "/s" + std::to_string(sp);
          }
        }
      }
      const std::string plan_name = std::string(tile_name(plan.tile)) + "/s" + std::to_string(plan.splits);
      std::printf(
          "%-11s %6ld %5ld %3ld | %7.1f %5.1f | %5.1f %5.1f | %7.1f %5.1f %-6s | %5.1f %-6s | %5.2f %5.2f | %7.1e\n",
          sh.name, long(sh.rows), long(sh.k), long(n), ms_lt * 1e3, pct(ms_lt), ms_skinny > 0 ? pct(ms_skinny) : 0.0,
          pct(ms_sm90), ms_plan * 1e3, pct(ms_plan), plan_name.c_str(), pct(ms_best), best.c_str(), ms_lt / ms_plan,
          ms_lt / ms_best, err);
      std::fflush(stdout);
      plan_ratio.push_back(ms_lt / ms_plan);
      best_ratio.push_back(ms_lt / ms_best);
      const std::string tag = std::string(sh.name) + " " + std::to_string(sh.rows) + "x" + std::to_string(sh.k) +
                              " n" + std::to_string(n);
      json.add("wgskinny plan " + tag, flop, bytes, ms_plan * 1e-3);
      json.add("wgskinny best " + tag, flop, bytes, ms_best * 1e-3);
      json.add("cublasLt " + tag, flop, bytes, ms_lt * 1e-3);
      json.add("gemm_sm90 " + tag, flop, bytes, ms_sm90 * 1e-3);
      if (ms_skinny > 0) json.add("skinny plan " + tag, flop, bytes, ms_skinny * 1e-3);
    }
  }
  const auto geo = [](const std::vector<double>& v) {
    double l = 0;
    for (const double r : v) l += std::log(r);
    return std::exp(l / double(v.size()));
  };
  std::printf("speed-up over cuBLASLt, geometric mean over %zu rows: plan %.3f, best of sweep %.3f; plan worst %.3f\n",
              plan_ratio.size(), geo(plan_ratio), geo(best_ratio),
              *std::min_element(plan_ratio.begin(), plan_ratio.end()));
  if (sweep) std::fclose(sweep);
  BENCH_CUDA_CHECK(cudaFree(x));
  BENCH_CUDA_CHECK(cudaFree(pool));
  BENCH_CUDA_CHECK(cudaFree(out));
  BENCH_CUDA_CHECK(cudaFree(ws));
  BENCH_CUDA_CHECK(cudaStreamDestroy(s));
  return json.write(json_path) ? 0 : 1;
}
