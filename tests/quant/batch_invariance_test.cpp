// Batch invariance of the CPU fast matmul (what the serving engine relies on: with temperature 0 a request's
// logits must be bit-identical whether its rows run alone or inside a batch with other sequences' rows).
//
// For every weight type and every SIMD level this CPU runs: a pool of 41 random activation rows; for batch
// sizes n = 1..37 the batch is rows [s, s + n) of the pool (s = n % 5, so a row sits at different places in
// the token tiles); every output row must equal, bit for bit, the same activation row multiplied alone
// (n = 1: the decode path, one weight row per kernel call) and the batch must also match the reference
// kernels to the loose tolerance of dot_test (so a kernel that returned garbage consistently would fail).
// n_out = 37 (not a multiple of any tile or chunk size) and two threads, so tiles and chunks have remainders;
// n_in holds an odd number of 32-value blocks (the 512-bit kernels' half-vector tail) where the type allows.
// Weights go through CpuBackend::prepare_weight first (Q4_1 at avx512: repacked 8 rows per block, kOut = 37
// leaves a partial last group).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/fp16.h"
#include "fixtures/numeric.h"
#include "formats/quant.h"

namespace ferry {
namespace {

constexpr int64_t kOut = 37;
constexpr int64_t kPool = 41;
constexpr int kMaxBatch = 37;

const DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                              DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q8_1, DType::Q2_K,
                              DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K};

bool is_k_quant(DType t) { return dtype_info(t).block_elems == kQKK; }

void set_fp16(uint8_t* p, float v) {
  const uint16_t h = f32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// kOut rows of n_in values of type t: quantized random floats where quantize_row supports the type, else
// random bytes with sane scale fields (Q2_K, Q3_K, Q5_K; offsets as in dot_test).
std::vector<uint8_t> random_weights(DType t, int64_t n_in, uint32_t seed) {
  const size_t rb = row_bytes(t, n_in);
  std::vector<uint8_t> w(rb * size_t(kOut));
  if (t != DType::Q2_K && t != DType::Q3_K && t != DType::Q5_K) {
    const auto f = test::random_floats(size_t(n_in * kOut), seed, 0.05f);
    for (int64_t r = 0; r < kOut; ++r) quantize_row(t, f.data() + r * n_in, w.data() + size_t(r) * rb, n_in);
    return w;
  }
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.0002f, 0.002f);
  for (auto& b : w) b = uint8_t(byte(rng));
  const size_t bb = size_t(dtype_info(t).block_bytes);
  for (size_t off = 0; off < w.size(); off += bb) {
    uint8_t* p = w.data() + off;
    if (t == DType::Q2_K) set_fp16(p + 80, scale(rng)), set_fp16(p + 82, scale(rng));
    if (t == DType::Q3_K) set_fp16(p + 108, scale(rng));
    if (t == DType::Q5_K) set_fp16(p, scale(rng)), set_fp16(p + 2, scale(rng));
  }
  return w;
}

TEST(BatchInvariance, MatmulRowsAloneEqualRowsInBatch) {
  for (SimdLevel level : supported_simd_levels()) {
    CpuBackend fast({.kernels = CpuKernels::Fast, .n_threads = 2, .simd = level});
    CpuBackend ref({.kernels = CpuKernels::Reference, .n_threads = 2});
    for (DType wt : kWeightTypes) {
      SCOPED_TRACE(std::string(simd_level_name(level)) + " " + std::string(dtype_name(wt)));
      const int64_t n_in = is_k_quant(wt) ? 3 * kQKK : 17 * kQK;  // 17 blocks of 32: odd
      auto w = random_weights(wt, n_in, 11u + uint32_t(wt));
      // through prepare_weight, as the model loader does (Q4_1 at avx512 is repacked: q4_1x8.h)
      std::vector<DeviceBuffer> keep;
      const Tensor tw_host = Tensor::make(wt, {kOut, n_in}, w.data());
      const Tensor tw = fast.prepare_weight(tw_host, keep);
      auto x = test::random_floats(size_t(kPool * n_in), 5u + uint32_t(wt));
      for (int64_t i = 0; i < kPool * n_in; i += 61) x[size_t(i)] *= 20.0f;  // a few outliers, as in LLMs

      // Each pool row alone (one token: the decode path).
      std::vector<float> alone(size_t(kPool * kOut));
      for (int64_t p = 0; p < kPool; ++p)
        fast.matmul(Tensor::make(DType::F32, {1, kOut}, alone.data() + p * kOut),
                    Tensor::make(DType::F32, {1, n_in}, x.data() + p * n_in), tw, Tensor{});

      for (int n = 1; n <= kMaxBatch; ++n) {
        const int64_t s = n % 5;
        std::vector<float> batch(size_t(n * kOut), std::nanf(""));
        const Tensor tx = Tensor::make(DType::F32, {n, n_in}, x.data() + s * n_in);
        fast.matmul(Tensor::make(DType::F32, {n, kOut}, batch.data()), tx, tw, Tensor{});
        int mismatches = 0;
        for (int64_t j = 0; j < n * kOut; ++j)
          if (std::memcmp(&batch[size_t(j)], &alone[size_t(s * kOut + j)], 4) != 0) ++mismatches;
        EXPECT_EQ(mismatches, 0) << "batch of " << n << " rows starting at pool row " << s;
        if (n == kMaxBatch) {  // the batch is also right, not only consistent
          std::vector<float> want(size_t(n * kOut));
          ref.matmul(Tensor::make(DType::F32, {n, kOut}, want.data()), tx, tw_host, Tensor{});
          // activation quantization error: per-4 scales (G4 types) or float activations stay within 1e-2;
          // one scale per 32 (Q8_1) or 256 (K-quants) loses more on the 20x outliers
          const DType at = activation_type(wt);
          const double tol = at == DType::Q8_1 || at == DType::Q8_K ? 5e-2 : 1e-2;
          EXPECT_LT(test::rel_l2(batch, want), tol);
        }
      }
    }
  }
}

}  // namespace
}  // namespace ferry
