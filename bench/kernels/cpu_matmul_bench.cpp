// CPU matmul harness: CpuBackend::matmul (fast kernels) on SmolLM2-135M's layer shapes, per weight type,
// SIMD level, token count and thread count. Prints the best of --reps timings (robust on a shared machine)
// and the median, as GMAC/s over the whole layer (q, k, v, o, gate, up, down). Weights go through
// CpuBackend::prepare_weight first, as the model loader does (Q4_1 is repacked at avx512).
// Usage: cpu_matmul_bench [--types q4_1,q4_0,...] [--tokens 1,128] [--threads 1,2] [--reps N] [--simd LEVEL]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <ctime>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "formats/quant.h"

using namespace ferry;

namespace {

double process_cpu_us() {  // CPU time of the whole process: with 1 thread, robust to other jobs' load
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) / 1e3;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

struct Shape {
  int64_t n_out, n_in;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> types = {"q4_1", "q4_0", "q8_0"}, tokens = {"128", "1"}, threads = {"1", "2"};
  std::vector<std::string> simd = {"avx512"};
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--types") types = split(argv[i + 1]);
    else if (a == "--tokens") tokens = split(argv[i + 1]);
    else if (a == "--threads") threads = split(argv[i + 1]);
    else if (a == "--simd") simd = split(argv[i + 1]);
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
  }
  // SmolLM2-135M: dim 576, 9 heads x 64, 3 KV heads, FFN 1536. One layer's projections.
  const std::vector<Shape> layer = {{576, 576}, {192, 576}, {192, 576}, {576, 576}, {1536, 576}, {1536, 576},
                                    {576, 1536}};
  int64_t macs_per_token = 0;
  for (const Shape& s : layer) macs_per_token += s.n_out * s.n_in;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::printf("%-6s %-7s %7s %7s %10s %10s %10s %10s %12s\n", "type", "simd", "tokens", "threads", "best_us",
              "median_us", "GMAC/s", "cpu_us", "GMAC/cpu-s");
  for (const std::string& tn : types) {
    const DType wt = *dtype_from_name(tn);
    std::vector<std::vector<uint8_t>> w(layer.size());
    for (size_t i = 0; i < layer.size(); ++i) {
      std::vector<float> f(size_t(layer[i].n_out * layer[i].n_in));
      for (float& v : f) v = normal(rng) * 0.05f;
      w[i].resize(row_bytes(wt, layer[i].n_in) * size_t(layer[i].n_out));
      for (int64_t r = 0; r < layer[i].n_out; ++r)
        quantize_row(wt, f.data() + r * layer[i].n_in, w[i].data() + size_t(r) * row_bytes(wt, layer[i].n_in),
                     layer[i].n_in);
    }
    for (const std::string& sl : simd) {
      const SimdLevel level = parse_simd_level(sl);
      if (!cpu_supports(level)) continue;
      for (const std::string& th : threads) {
        CpuBackend be({.kernels = CpuKernels::Fast, .n_threads = std::atoi(th.c_str()), .simd = level});
        // as the model loader does: the backend may repack (Q4_1 at avx512: q4_1x8.h)
        std::vector<DeviceBuffer> keep;
        std::vector<Tensor> prepared;
        for (size_t i = 0; i < layer.size(); ++i)
          prepared.push_back(be.prepare_weight(Tensor::make(wt, {layer[i].n_out, layer[i].n_in}, w[i].data()), keep));
        for (const std::string& tk : tokens) {
          const int64_t n = std::atoll(tk.c_str());
          std::vector<float> x(size_t(n * 1536)), y(size_t(n * 1536));
          for (float& v : x) v = normal(rng);
          std::vector<double> us, cpu;
          for (int rep = 0; rep < reps + 2; ++rep) {
            const auto t0 = std::chrono::steady_clock::now();
            const double c0 = process_cpu_us();
            for (size_t i = 0; i < layer.size(); ++i) {
              const Tensor tx = Tensor::make(DType::F32, {n, layer[i].n_in}, x.data());
              const Tensor ty = Tensor::make(DType::F32, {n, layer[i].n_out}, y.data());
              be.matmul(ty, tx, prepared[i], Tensor{});
            }
            const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
            if (rep >= 2) us.push_back(t), cpu.push_back(process_cpu_us() - c0);
          }
          std::sort(us.begin(), us.end());
          std::sort(cpu.begin(), cpu.end());
          std::printf("%-6s %-7s %7lld %7s %10.1f %10.1f %10.2f %10.1f %12.2f\n", tn.c_str(), sl.c_str(),
                      (long long)n, th.c_str(), us.front(), us[us.size() / 2],
                      double(macs_per_token * n) / us.front() / 1e3, cpu.front(),
                      double(macs_per_token * n) / cpu.front() / 1e3);
        }
      }
    }
  }
  return 0;
}
