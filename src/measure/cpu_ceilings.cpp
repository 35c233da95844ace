// Measures the CPU roofline ceilings (see cpu_ceilings.h for what and how).
#include "measure/cpu_ceilings.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <memory>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/check.h"
#include "core/thread_pool.h"
#include "fmt/format.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr int kChains = 12;  // independent FMA chains per thread: > latency (4) × ports (2)

// Each returns a value that depends on every iteration (so the loop is not removed). flops: 2 per lane-FMA.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) float fma_avx512(int64_t iters) {
  __m512 acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_ps(float(k + 1));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_fmadd_ps(acc[k], a, b);
  __m512 s = acc[0];
  for (int k = 1; k < kChains; ++k) s = _mm512_add_ps(s, acc[k]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float r = 0;
  for (float v : lanes) r += v;
  return r;
}

__attribute__((target("avx2,fma"))) float fma_avx2(int64_t iters) {
  __m256 acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_ps(float(k + 1));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_fmadd_ps(acc[k], a, b);
  __m256 s = acc[0];
  for (int k = 1; k < kChains; ++k) s = _mm256_add_ps(s, acc[k]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float r = 0;
  for (float v : lanes) r += v;
  return r;
}
#endif

// Plain C++: the compiler vectorises the inner loop for the baseline ISA (a multiply and an add per value).
float fma_scalar(int64_t iters) {
  constexpr int kLanes = 4;
  float acc[kChains * kLanes];
  for (int k = 0; k < kChains * kLanes; ++k) acc[k] = float(k + 1);
  for (int64_t i = 0; i < iters; ++i)
    for (float& v : acc) v = v * 0.999999f + 1e-7f;
  float r = 0;
  for (float v : acc) r += v;
  return r;
}

struct FmaKernel {
  float (*fn)(int64_t);
  int lanes;  // f32 values per chain step
  const char* name;
};

FmaKernel fma_kernel(SimdLevel level) {
#if defined(__x86_64__)
  if (level == SimdLevel::Avx512) return {fma_avx512, 16, "AVX-512"};
  if (level == SimdLevel::Avx2) return {fma_avx2, 8, "AVX2"};
#endif
  return {fma_scalar, 4, "plain C++, multiply-add"};
}

// The last-level cache: the highest cache level sysfs lists for cpu0 (sysconf's figure is wrong in some VMs),
// else sysconf; 0 when neither knows.
double llc_bytes() {
  int best_level = 0;
  double best = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size");
    int level = 0;
    std::string size;  // "32768K"
    if (!(level_file >> level) || !(size_file >> size) || size.empty()) continue;
    char* end = nullptr;
    const double v = std::strtod(size.c_str(), &end);
    const double unit = *end == 'K' ? 1024.0 : *end == 'M' ? 1048576.0 : *end == 'G' ? 1073741824.0 : 1.0;
    if (v <= 0 || level < best_level) continue;
    best = level > best_level ? v * unit : std::max(best, v * unit);
    best_level = level;
  }
  if (best > 0) return best;
  long v = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
  v = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (v <= 0) v = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  return v > 0 ? double(v) : 0.0;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

CpuCeilingsReport measure_cpu_ceilings(int n_threads, SimdLevel level) {
  const auto t_start = Clock::now();
  ThreadPool pool(n_threads);
  const int threads = pool.size();
  CpuCeilingsReport r;
  r.threads = threads;
  r.llc_bytes = llc_bytes();

  // Bandwidth: one buffer, a contiguous slice per thread (first touched by the thread that reads it).
  constexpr double kMin = 64.0 * (1 << 20), kMax = 512.0 * (1 << 20);
  constexpr size_t kAlign = size_t(2) << 20;
  const size_t bytes = size_t(std::clamp(4 * r.llc_bytes, kMin, kMax)) / kAlign * kAlign;
  std::unique_ptr<void, FreeDeleter> mem(std::aligned_alloc(kAlign, bytes));
  FERRY_CHECK(mem != nullptr, "cannot allocate {} MiB to measure memory bandwidth", bytes >> 20);
#ifdef MADV_HUGEPAGE
  madvise(mem.get(), bytes, MADV_HUGEPAGE);  // fewer page faults while filling; a hint, failure is harmless
#endif
  auto* words = static_cast<uint64_t*>(mem.get());  // (n_words) filled with a pattern
  const int64_t n_words = int64_t(bytes / sizeof(uint64_t));
  const int64_t n_slices = threads;
  const int64_t slice = (n_words + n_slices - 1) / n_slices / 8 * 8;
  pool.run_chunks(n_slices, [&](int64_t s) {
    const int64_t b = std::min(n_words, s * slice), e = s + 1 == n_slices ? n_words : std::min(n_words, b + slice);
    for (int64_t i = b; i < e; ++i) words[i] = uint64_t(i) * 0x9E3779B97F4A7C15ull;
  });
  std::vector<uint64_t> sums(size_t(n_slices) * 8, 0);  // one cache line per slice
  double best = 1e30;
  const auto t_bw = Clock::now();
  for (int pass = 0; pass < 5 && (pass < 2 || since(t_bw) < 0.15); ++pass) {
    const auto t0 = Clock::now();
    pool.run_chunks(n_slices, [&](int64_t s) {
      const int64_t b = std::min(n_words, s * slice), e = s + 1 == n_slices ? n_words : std::min(n_words, b + slice);
      uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t i = b;
      for (; i + 8 <= e; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] += words[i + k];
      for (; i < e; ++i) acc[0] += words[i];
      for (int k = 0; k < 8; ++k) sums[size_t(s) * 8] += acc[k];
    });
    best = std::min(best, since(t0));
  }
  volatile uint64_t checksum = 0;  // keeps the reads observable
  for (uint64_t v : sums) checksum = checksum + v;
  mem.reset();

  // Peak: calibrate the iteration count on one thread (~2 ms), then 3 runs of ~25 ms on every thread.
  const FmaKernel k = fma_kernel(level);
  volatile float sink = 0;
  int64_t iters = 20000;
  for (;;) {
    const auto t0 = Clock::now();
    sink = sink + k.fn(iters);
    const double s = since(t0);
    if (s > 2e-3 || iters > (int64_t(1) << 40)) {
      iters = std::max<int64_t>(1, int64_t(double(iters) * 0.025 / std::max(s, 1e-9)));
      break;
    }
    iters *= 4;
  }
  std::vector<float> fma_out(size_t(threads), 0.0f);
  double fma_seconds = 1e30;  // best of 3 runs: another process on a core only makes a run slower
  for (int run = 0; run < 3; ++run) {
    const auto t_fma = Clock::now();
    pool.run_chunks(threads, [&](int64_t t) { fma_out[size_t(t)] = k.fn(iters); });
    fma_seconds = std::min(fma_seconds, since(t_fma));
    for (float v : fma_out) sink = sink + v;
  }

  r.buffer_bytes = double(bytes);
  r.ceilings.bytes_per_s = double(bytes) / best;
  r.ceilings.flops_per_s = double(threads) * double(iters) * kChains * k.lanes * 2.0 / fma_seconds;
  r.seconds = since(t_start);
  r.ceilings.source = fmt::format(
      "measured on this CPU in {:.2f} s, {} threads: read bandwidth over a {} MiB buffer (LLC {} MiB), best of "
      "passes; f32 peak from an FMA loop ({}; measured, not width x cores x clock)",
      r.seconds, threads, bytes >> 20, int64_t(r.llc_bytes) >> 20, k.name);
  return r;
}

}  // namespace ferry
