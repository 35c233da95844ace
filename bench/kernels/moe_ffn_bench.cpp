// The CUDA mixture-of-experts FFN (CudaBackend::moe_ffn: GPU routing, the routed experts' gate / up+SwiGLU /
// down passes, the combine) on one layer of the Qwen3-30B-A3B shape (128 experts, top-8, dim 2048, 768 hidden
// units) and the Mixtral-8x7B shape (8 experts, top-2, dim 4096, 14336 hidden), BF16, Q8_0, Q4_0 and Q4_K experts.
//
// Per shape, type and token count n: time per call (CUDA events around batches of 10 back-to-back calls, median of
// 15 batches after 3 warm-ups), the experts the step routes to (from the routing of the same inputs, computed on the
// host: f32 logits in 8 partial sums, route_moe), the bytes of those experts' gate, up and down weights (the only
// weight bytes a step must read; router and activations are < 1% and not counted), and that over the time as % of
// the 4.30 TB/s copy roofline (../shared/GPU.md); for the grouped-GEMM rows also the achieved TFLOP/s
// (2 n top_k (2 dim H + H dim) FLOP a call). The Qwen3 shape rotates over 4 copies of the layer (distinct memory, 8
// input sets), so a call's experts are not in the 60 MB L2 from the call before; the Mixtral shape reads >= 2 x
// 176 MB a call. The "path" column names the expert kernel moe_experts_use_matvec picks (the matvec up to 16 tokens,
// the grouped GEMM on tensor cores above).
// Every line is printed as it is measured (stdout unbuffered).
// Usage: moe_ffn_bench [--json FILE] [--quick | --prefill] [--mixtral-512]
//   --quick: the Qwen3 shape, n = 1 and 8 only;
//   --prefill: the Qwen3 shape, n = 64 (the matvec, by the rule above) and 512 (the grouped GEMM) only;
//   --mixtral-512: the Mixtral shape at n = 512 too (by default it stops at n = 64: its layer is 2.8 GB in BF16, and
//   at 512 tokens every call reads all of it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/moe/moe_experts.cuh"
#include "cuda_bench.h"
#include "formats/quant.h"
#include "kernel_json.h"
#include "ops/moe_routing.h"

namespace {

using namespace ferry;

struct Shape {
  const char* name;
  int E, top_k;
  int64_t dim, H;
  int copies;  // layer copies rotated over
};

// One layer on the device: router (E, dim) f32, per expert gate/up (H, dim) and down (dim, H) of `type`; one
// expert's bytes quantized from random values and copied to every expert (distinct memory: the bandwidth is real).
struct Layer {
  std::vector<DeviceBuffer> keep;
  Tensor router;
  std::vector<Tensor> gate, up, down;
};

std::vector<uint8_t> random_weight(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f / std::sqrt(float(cols)));
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<uint8_t> bytes(size_t(rows) * row_bytes(type, cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(rng);
    quantize_row(type, row.data(), bytes.data() + size_t(r) * row_bytes(type, cols), cols);
  }
  return bytes;
}

void make_layer(CudaBackend& gpu, Layer& L, const Shape& s, DType type, const std::vector<float>& router,
                std::vector<uint8_t>& g, std::vector<uint8_t>& u, std::vector<uint8_t>& d) {
  std::vector<float> rc = router;
  L.router = gpu.prepare_weight(Tensor::make(DType::F32, {s.E, s.dim}, rc.data()), L.keep);
  for (int e = 0; e < s.E; ++e) {
    L.gate.push_back(gpu.prepare_weight(Tensor::make(type, {s.H, s.dim}, g.data()), L.keep));
    L.up.push_back(gpu.prepare_weight(Tensor::make(type, {s.H, s.dim}, u.data()), L.keep));
    L.down.push_back(gpu.prepare_weight(Tensor::make(type, {s.dim, s.H}, d.data()), L.keep));
  }
}

// Experts the n tokens of x route to (f32 logits summed in 8 interleaved partial sums, route_moe): only the count
// of distinct experts is used, so a near-tie decided differently from the GPU changes nothing that matters.
int routed_experts(const Shape& s, const std::vector<float>& router, const float* x, int64_t n) {
  constexpr int kLanes = 8;
  std::vector<float> logits(size_t(n) * size_t(s.E));
  for (int64_t t = 0; t < n; ++t)
    for (int e = 0; e < s.E; ++e) {
      const float* w = router.data() + size_t(e) * size_t(s.dim);
      const float* xt = x + t * s.dim;
      float part[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= s.dim; i += kLanes)
        for (int l = 0; l < kLanes; ++l) part[l] += w[i + l] * xt[i + l];
      for (; i < s.dim; ++i) part[0] += w[i] * xt[i];
      double z = 0;
      for (const float p : part) z += p;
      logits[size_t(t) * size_t(s.E) + size_t(e)] = float(z);
    }
  const MoeRoutes r = route_moe(logits.data(), n, s.E, s.top_k, MoeNorm::Renormalize);
  return int(std::set<int32_t>(r.expert.begin(), r.expert.end()).size());
}

// "12.3": a TFLOP/s figure for the table.
std::string fmt_tflops(double tflops) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", tflops);
  return buf;
}

// The token counts run on a shape.
std::vector<int64_t> token_counts(const Shape& s, bool quick, bool prefill, bool mixtral_512) {
  if (quick) return {1, 8};
  if (prefill) return {64, 512};
  if (s.E <= 8 && !mixtral_512) return {1, 2, 4, 8, 16, 64};
  return {1, 2, 4, 8, 16, 64, 512};
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // every line out as it is measured (a timeout keeps what ran)
  std::string json_path;
  bool quick = false, prefill = false, mixtral_512 = false;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--json" && a + 1 < argc) {
      json_path = argv[++a];
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--prefill") {
      prefill = true;
    } else if (arg == "--mixtral-512") {
      mixtral_512 = true;
    } else {
      std::fprintf(stderr, "usage: moe_ffn_bench [--json FILE] [--quick | --prefill] [--mixtral-512]\n");
      return 2;
    }
  }
  if (quick && prefill) {
    std::fprintf(stderr, "moe_ffn_bench: --quick and --prefill exclude each other\n");
    return 2;
  }
  cudaDeviceProp prop;
  if (!bench::report_device(prop)) return 1;
  bench::KernelJson json;
  const Shape qwen3{"qwen3-30b-a3b", 128, 8, 2048, 768, 4}, mixtral{"mixtral-8x7b", 8, 2, 4096, 14336, 1};
  const std::vector<Shape> shapes =
      quick || prefill ? std::vector<Shape>{qwen3} : std::vector<Shape>{qwen3, mixtral};
  constexpr int kInputSets = 8;
  std::printf("%-14s %-5s %5s %-6s %10s %8s %12s %9s %8s %9s\n", "shape", "type", "n", "path", "us/call", "experts",
              "routed MB", "GB/s", "% roof", "TFLOP/s");
  for (const Shape& s : shapes)
    for (const DType type : {DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
      CudaBackend gpu;
      std::mt19937 rng(1);
      std::normal_distribution<float> dist(0.0f, 2.0f / std::sqrt(float(s.dim)));
      std::vector<float> router(size_t(s.E) * size_t(s.dim));
      for (float& v : router) v = dist(rng);
      std::vector<uint8_t> g = random_weight(type, s.H, s.dim, 2), u = random_weight(type, s.H, s.dim, 3),
                           d = random_weight(type, s.dim, s.H, 4);
      std::vector<std::unique_ptr<Layer>> layers;
      for (int c = 0; c < s.copies; ++c) {
        layers.push_back(std::make_unique<Layer>());
        make_layer(gpu, *layers.back(), s, type, router, g, u, d);
      }
      const double expert_bytes = double(g.size() + u.size() + d.size());
      for (const int64_t n : token_counts(s, quick, prefill, mixtral_512)) {
        std::vector<float> xh(size_t(kInputSets) * size_t(n * s.dim));
        std::normal_distribution<float> xd(0.0f, 1.0f);
        for (float& v : xh) v = xd(rng);
        DeviceBuffer xbuf = gpu.alloc(xh.size() * 4), obuf = gpu.alloc(size_t(n * s.dim) * 4);
        const Tensor xall = xbuf.view(DType::F32, {int64_t(kInputSets) * n, s.dim});
        gpu.copy_to_device(xall, xh.data(), xh.size() * 4);
        const Tensor out = obuf.view(DType::F32, {n, s.dim});
        double experts = 0;
        for (int i = 0; i < kInputSets; ++i) experts += routed_experts(s, router, xh.data() + size_t(i) * size_t(n * s.dim), n);
        experts /= kInputSets;
        int64_t call = 0;
        const auto launch = [&] {
          const Layer& L = *layers[size_t(call % s.copies)];
          const int64_t set = (call / s.copies) % kInputSets;
          ++call;
          gpu.moe_ffn({.out = out, .x = xall.rows_view(set * n, n), .router = L.router, .gate_exps = L.gate,
                       .up_exps = L.up, .down_exps = L.down, .top_k = s.top_k, .norm = MoeNorm::Renormalize});
        };
        launch();
        gpu.synchronize();  // sizes the scratch, builds the expert tables (every copy: the first calls)
        for (int c = 1; c < s.copies; ++c) launch();
        gpu.synchronize();
        const double ms = bench::median_ms(gpu.stream(), launch, 15, 10, 3);
        gpu.synchronize();
        const double bytes = experts * expert_bytes;
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        const double flops = 2.0 * 3.0 * double(n) * s.top_k * double(s.dim) * double(s.H);
        const std::string tname(dtype_name(type));
        const bool gemm = !cuda_ops::moe_experts_use_matvec(n);
        const std::string tflops = gemm ? fmt_tflops(flops / (ms * 1e-3) / 1e12) : "-";
        std::printf("%-14s %-5s %5lld %-6s %10.1f %8.1f %12.1f %9.0f %7.1f%% %9s\n", s.name, tname.c_str(),
                    (long long)n, gemm ? "gemm" : "matvec", ms * 1e3, experts, bytes / 1e6, gbs,
                    100.0 * bytes / (ms * 1e-3) / bench::kCopyBytesPerSecond, tflops.c_str());
        json.add(std::string("moe_ffn ") + s.name + " " + tname + " n" + std::to_string(n), flops, bytes, ms * 1e-3);
      }
    }
  return json.write(json_path) ? 0 : 1;
}
