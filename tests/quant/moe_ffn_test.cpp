// Backend::moe_ffn on the CPU, on fresh random inputs (never zeros), E = 8 experts, top-k 1..3:
//  - the reference kernel (plain loops) against a double-precision oracle written here from the op's definition
//    (softmax, top-k, Softmax/Renormalize weights, SwiGLU experts, weighted sum) on the dequantized weights:
//    rel L2 <= 1e-5;
//  - the fast kernel (tokens grouped by expert, activations quantized) against the reference: rel L2 <= 1e-5 for
//    F32 weights, <= 2e-2 for the quantized and half types and 3e-2 for the K-quants (two matmuls in series whose
//    activations are quantized: Q8_K has one scale per 256 values; measured up to 2.5e-2);
//  - Backend's default composition (matmul, gather_rows, swiglu per expert) against the reference: <= 1e-5;
//  - route_moe's choices, weights and grouping; bad arguments are one ferry::Error, never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd.h"
#include "fixtures/numeric.h"
#include "formats/quant.h"

namespace ferry {
namespace {

constexpr int kExperts = 8;

// E matrices of (rows, cols) in `type`, each from fresh normal values scaled by 1/sqrt(cols).
struct Experts {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<Tensor> tensors;
  std::vector<std::vector<float>> values;  // dequantized: what the weights are
};
Experts make_experts(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  Experts ex;
  ex.bytes.resize(kExperts);
  ex.values.resize(kExperts);
  for (int e = 0; e < kExperts; ++e) {
    const std::vector<float> v = test::random_floats(size_t(rows * cols), seed + uint32_t(e), 1.0f / std::sqrt(float(cols)));
    ex.bytes[size_t(e)].resize(size_t(rows) * row_bytes(type, cols));
    ex.values[size_t(e)].resize(v.size());
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t* row = ex.bytes[size_t(e)].data() + size_t(r) * row_bytes(type, cols);
      quantize_row(type, v.data() + r * cols, row, cols);
      dequantize_row(type, row, ex.values[size_t(e)].data() + r * cols, cols);
    }
  }
  for (auto& b : ex.bytes) ex.tensors.push_back(Tensor::make(type, {rows, cols}, b.data()));
  return ex;
}

struct Case {
  int64_t n, dim, hidden;
  Experts gate, up, down;
  std::vector<float> router, x;
};
Case make_case(DType type, int64_t n, int64_t dim, int64_t hidden, uint32_t seed) {
  Case c{n, dim, hidden, make_experts(type, hidden, dim, seed), make_experts(type, hidden, dim, seed + 100),
         make_experts(type, dim, hidden, seed + 200), test::random_floats(size_t(kExperts * dim), seed + 300, 2.0f / std::sqrt(float(dim))),
         test::random_floats(size_t(n * dim), seed + 400)};
  return c;
}

std::vector<float> run(Backend& b, Case& c, int top_k, MoeNorm norm, bool base_default = false) {
  std::vector<float> out(size_t(c.n * c.dim), std::numeric_limits<float>::quiet_NaN());
  const MoeFfnArgs a{.out = Tensor::make(DType::F32, {c.n, c.dim}, out.data()),
                     .x = Tensor::make(DType::F32, {c.n, c.dim}, c.x.data()),
                     .router = Tensor::make(DType::F32, {kExperts, c.dim}, c.router.data()),
                     .gate_exps = c.gate.tensors, .up_exps = c.up.tensors, .down_exps = c.down.tensors,
                     .top_k = top_k, .norm = norm};
  if (base_default) {
    b.Backend::moe_ffn(a);
  } else {
    b.moe_ffn(a);
  }
  return out;
}

// The op's definition in double precision on the dequantized weights.
std::vector<float> oracle(const Case& c, int top_k, MoeNorm norm) {
  std::vector<float> out(size_t(c.n * c.dim));
  for (int64_t t = 0; t < c.n; ++t) {
    const float* x = c.x.data() + t * c.dim;
    std::vector<double> p(kExperts);
    for (int e = 0; e < kExperts; ++e) {
      double z = 0;
      for (int64_t i = 0; i < c.dim; ++i) z += double(c.router[size_t(e * c.dim + i)]) * x[i];
      p[size_t(e)] = z;
    }
    const double mx = *std::max_element(p.begin(), p.end());
    double sum = 0;
    for (double& v : p) sum += v = std::exp(v - mx);
    for (double& v : p) v /= sum;
    std::vector<int> order(kExperts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
    double chosen = 0;
    for (int j = 0; j < top_k; ++j) chosen += p[size_t(order[size_t(j)])];
    std::vector<double> acc(size_t(c.dim), 0.0), h(size_t(c.hidden));
    for (int j = 0; j < top_k; ++j) {
      const int e = order[size_t(j)];
      const double w = norm == MoeNorm::Renormalize ? p[size_t(e)] / chosen : p[size_t(e)];
      for (int64_t r = 0; r < c.hidden; ++r) {
        double g = 0, u = 0;
        for (int64_t i = 0; i < c.dim; ++i) {
          g += double(c.gate.values[size_t(e)][size_t(r * c.dim + i)]) * x[i];
          u += double(c.up.values[size_t(e)][size_t(r * c.dim + i)]) * x[i];
        }
        h[size_t(r)] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t r = 0; r < c.dim; ++r) {
        double y = 0;
        for (int64_t i = 0; i < c.hidden; ++i) y += double(c.down.values[size_t(e)][size_t(r * c.hidden + i)]) * h[size_t(i)];
        acc[size_t(r)] += w * y;
      }
    }
    for (int64_t r = 0; r < c.dim; ++r) out[size_t(t * c.dim + r)] = float(acc[size_t(r)]);
  }
  return out;
}

CpuBackend make_backend(CpuKernels k) {
  CpuBackendOptions o;
  o.kernels = k;
  o.n_threads = 2;
  o.simd = detect_simd();
  return CpuBackend(o);
}

TEST(MoeFfn, ReferenceMatchesTheDefinitionFastAndDefaultMatchTheReference) {
  CpuBackend ref = make_backend(CpuKernels::Reference), fast = make_backend(CpuKernels::Fast);
  uint32_t seed = 1;
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K}) {
    const bool k_quant = type == DType::Q4_K || type == DType::Q6_K;
    const int64_t dim = k_quant ? 256 : 96, hidden = k_quant ? 256 : 64;
    for (int64_t n : {1, 5, 33}) {
      for (int top_k : {1, 2, 3}) {
        for (MoeNorm norm : {MoeNorm::Softmax, MoeNorm::Renormalize}) {
          Case c = make_case(type, n, dim, hidden, seed += 1000);
          const std::vector<float> want = oracle(c, top_k, norm), r = run(ref, c, top_k, norm);
          const std::string where = std::string(dtype_name(type)) + " n " + std::to_string(n) + " top-" +
                                    std::to_string(top_k) + " " + moe_norm_name(norm);
          EXPECT_LE(test::rel_l2(r, want), 1e-5) << where << ": reference vs definition";
          const double fast_err = test::rel_l2(run(fast, c, top_k, norm), r);
          EXPECT_LE(fast_err, type == DType::F32 ? 1e-5 : k_quant ? 3e-2 : 2e-2) << where << ": fast vs reference";
          EXPECT_LE(test::rel_l2(run(ref, c, top_k, norm, true), r), 1e-5) << where << ": default vs reference";
        }
      }
    }
  }
}

TEST(MoeFfn, RouteMoeChoosesWeighsAndGroups) {
  // token 0: experts 2 > 0 > 1 > 3; token 1: 3 > 1 > 0 = 2 (a tie: the lower index first)
  const float logits[] = {1.0f, 0.5f, 2.0f, -1.0f, 0.0f, 1.0f, 0.0f, 3.0f};
  const MoeRoutes r = route_moe(logits, 2, 4, 3, MoeNorm::Renormalize);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{2, 0, 1, 3, 1, 0}));
  const double e2 = std::exp(2.0), e1 = std::exp(1.0), e05 = std::exp(0.5);
  EXPECT_NEAR(r.weight[0], e2 / (e2 + e1 + e05), 1e-6);
  EXPECT_NEAR(r.weight[0] + r.weight[1] + r.weight[2], 1.0, 1e-6);
  const MoeRoutes s = route_moe(logits, 2, 4, 3, MoeNorm::Softmax);
  EXPECT_NEAR(s.weight[0], e2 / (e2 + e1 + e05 + std::exp(-1.0)), 1e-6);
  // grouped by expert, token order inside: expert 0 <- slots 1 (t0) and 5 (t1); 1 <- 2, 4; 2 <- 0; 3 <- 3
  EXPECT_EQ(r.offsets, (std::vector<int32_t>{0, 2, 4, 5, 6}));
  EXPECT_EQ(r.slots, (std::vector<int32_t>{1, 5, 2, 4, 0, 3}));
}

TEST(MoeFfn, BadArgumentsAreOneError) {
  CpuBackend b = make_backend(CpuKernels::Fast);
  Case c = make_case(DType::F32, 3, 32, 32, 7);
  EXPECT_THROW(run(b, c, kExperts + 1, MoeNorm::Softmax), Error);
  EXPECT_THROW(run(b, c, 0, MoeNorm::Softmax), Error);
  c.down.tensors.pop_back();  // 7 down experts for 8
  EXPECT_THROW(run(b, c, 2, MoeNorm::Softmax), Error);
  const float nan_logits[] = {0.0f, std::nanf("")};
  EXPECT_THROW(route_moe(nan_logits, 1, 2, 1, MoeNorm::Softmax), Error);
}

}  // namespace
}  // namespace ferry
