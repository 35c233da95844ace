// CPU activation-quantizer harness: quantize_activations (Q8_0G4 / Q8_1G4, the fast matmul's first step)
// over 128 token rows of 1536 values (SmolLM2-135M's FFN width), per SIMD level; best of --reps passes.
// Usage: cpu_quantize_bench [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/quant_dot.h"
#include "formats/quant.h"

using namespace ferry;

int main(int argc, char** argv) {
  int reps = 200;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
  const int64_t n = 1536, rows = 128;
  std::vector<float> x(size_t(n * rows));  // (rows, n) row-major, normal(0, 1)
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);
  std::printf("%-8s %-7s %10s %10s\n", "format", "simd", "best_us", "ns/value");
  for (SimdLevel level : supported_simd_levels()) {
    const DotKernels k = select_dot_kernels(level);
    for (DType at : {DType::Q8_0G4, DType::Q8_1G4}) {
      const size_t rb = row_bytes(at, n);
      std::vector<uint8_t> out(rb * size_t(rows));  // (rows, rb) bytes
      double best = 1e30;
      for (int rep = 0; rep < reps; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t r = 0; r < rows; ++r) quantize_activations(k, at, x.data() + r * n, out.data() + size_t(r) * rb, n);
        best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("%-8s %-7s %10.1f %10.3f\n", dtype_name(at).data(), simd_level_name(level).data(), best,
                  best * 1e3 / double(n * rows));
    }
  }
}
