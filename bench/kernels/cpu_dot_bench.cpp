// Micro-benchmark of the CPU dot kernels: one (rows x n) weight matrix times n_x activation rows, per weight
// type and SIMD level, single thread. Prints ns per weight row, weight GB/s and GMAC/s.
// Not built by CMake yet; build by hand after building ferry_cpu in build-quant:
//   g++ -O2 -std=c++20 -Isrc bench/kernels/cpu_dot_bench.cpp build-quant/libferry_cpu.a \
//       build-quant/libferry_formats.a build-quant/libferry_core.a -lfmt -o /tmp/cpu_dot_bench
// Usage: cpu_dot_bench [rows] [n]   (default 1536 x 576, SmolLM2-135M's FFN up projection)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cpu/quant_dot.h"
#include "formats/quant.h"

using namespace ferry;

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 1536;
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 576;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> wf(size_t(rows * n)), xf(size_t(4 * n));
  for (auto& v : wf) v = normal(rng);
  for (auto& v : xf) v = normal(rng);
  const DType types[] = {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::BF16, DType::F16,
                         DType::F32,  DType::Q4_K, DType::Q6_K, DType::Q5_0, DType::Q5_1};
  std::printf("%-6s %-7s %3s %10s %9s %9s\n", "type", "level", "n_x", "ns/row", "GB/s(w)", "GMAC/s");
  for (DType wt : types) {
    if (n % dtype_info(wt).block_elems != 0) continue;
    const size_t wrow = row_bytes(wt, n);
    std::vector<uint8_t> w(wrow * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) quantize_row(wt, wf.data() + r * n, w.data() + r * wrow, n);
    const DType xt = activation_type(wt);
    const size_t xrow = row_bytes(xt, n);
    std::vector<uint8_t> x(xrow * 4);
    for (int j = 0; j < 4; ++j) quantize_row(xt, xf.data() + j * n, x.data() + j * xrow, n);
    for (SimdLevel level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
      if (!cpu_supports(level)) continue;
      const DotKernels k = select_dot_kernels(level);
      const DotFn fn = dot_kernel(k, wt);
      for (int n_x : {1, 4}) {
        float out[4], sink = 0.0f;
        int reps = 0;
        const auto t0 = std::chrono::steady_clock::now();
        double elapsed = 0.0;
        do {
          for (int64_t r = 0; r < rows; ++r) {
            fn({.n = n, .w = w.data() + r * wrow, .w_row_bytes = wrow, .n_w = 1, .x = x.data(),
                .x_row_bytes = xrow, .n_x = n_x, .out = out, .out_stride = 1});
            sink += out[0];
          }
          ++reps;
          elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        } while (elapsed < 0.15);
        const double per_row = elapsed / double(reps * rows);
        std::printf("%-6s %-7s %3d %10.1f %9.2f %9.2f%s\n", std::string(dtype_name(wt)).c_str(),
                    std::string(simd_level_name(level)).c_str(), n_x, per_row * 1e9, double(wrow) / per_row / 1e9,
                    double(n) * n_x / per_row / 1e9, sink == 12345.0f ? "!" : "");
      }
    }
  }
}
