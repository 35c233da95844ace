// CudaBackend::moe_ffn (src/backends/cuda/moe/) against the CPU reference (CpuBackend::moe_ffn, reference kernels:
// plain loops over the exactly decoded weights in f32) on fresh random inputs (never zeros):
//  - the whole op over token counts 1, 2, 7, 16, 64 and 300, top-k 2 and 8, 8 and 128 experts, BF16, Q8_0, Q4_0 and
//    Q4_K experts (and every other native type at one shape), both MoeNorm modes; the output NaN-poisoned first
//    (every element written), and a second run gives the same bits (no atomics in the arithmetic). Which kernel
//    runs a step is moe_experts_use_matvec's rule (the matvec up to 16 tokens, the grouped GEMM above). Tolerances (rel L2
//    against the f32 CPU reference):
//      the matvec: 1e-4: both sides are f32 throughout on the same weights, only the summation order differs;
//      the grouped GEMM: 1e-2, as the dense bf16 GEMM tests (matmul_test, skinny_mma_test's backend case). The
//      tensor cores take bf16 operands: the activations (x for gate and up, h for down) and the decoded weights of
//      every type but BF16 are rounded to bf16, a relative error of at most 2^-9 each (about 1e-3 rms), so each
//      projection's output is off by ~1.5e-3 rms and the layer, after gate, up, SwiGLU and down, by 2.7e-3 (BF16)
//      to 3.9e-3 (Q4_0) on the host (CudaMoeReference below holds it under 5e-3). A wrong kernel is off by O(1): a
//      transposed fragment, a skipped k-step (here 2 of them a projection: ~0.7) or a missed slot tile (its slots
//      stay NaN). Tighter, the GEMM path also matches, to 5e-4, a host reference with its roundings (the CPU
//      reference's routing, then every expert dot over bf16-rounded weights and activations, summed in double):
//      what is left is the f32 summation order, whose 1e-7..1e-6 relative differences in gate and up flip the
//      bf16 rounding of a few h values by one ulp (2^-7) each, and the decoders' fma contraction doing the same
//      to a few weights: up to 1.3e-4 on the host when the reference's dots are perturbed by 1e-6 relative. An
//      f32 kernel would be 2.7e-3 or more away (CudaMoeReference);
//  - the routing and grouping kernels against route_moe: the same experts (ties impossible on random logits),
//    weights within 1e-6, offsets and active experts equal, each expert's group the same set of slots, the GEMM's
//    tile list covering every group in order;
//  - a step captured in a step graph and replayed on new inputs matches the CPU on those inputs (routing read
//    from device memory, no host synchronisation inside the op).
#ifdef FERRY_HAS_CUDA

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "backends/cpu/quant_dot.h"
#include "backends/cuda/moe/moe_experts.cuh"
#include "backends/cuda/moe/moe_routing.cuh"
#include "cuda_test_util.h"
#include "formats/quant.h"
#include "ops/moe_routing.h"

namespace ferry::test {
namespace {

constexpr double kTol = 1e-4;      // the expert matvec: f32 throughout
constexpr double kGemmTol = 1e-2;  // the grouped GEMM: bf16 operands on tensor cores (the header says why)
constexpr double kGemmBf16Tol = 5e-4;  // the grouped GEMM against run_bf16_reference (the header says why)
// Whether CudaBackend::moe_ffn runs a step of n tokens, top-k of E experts, through the grouped GEMM.
bool runs_gemm(int64_t n) { return !cuda_ops::moe_experts_use_matvec(n); }
// The tolerance of such a step: the path that runs it.
double tolerance(int64_t n) { return runs_gemm(n) ? kGemmTol : kTol; }

// E weights (rows, cols) of one type from fresh normal values scaled by 1/sqrt(cols): host bytes and tensors (for
// the CPU) and the prepared device tensors.
struct ExpertSet {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<Tensor> host, dev;
};

struct MoeCase {
  int E = 0;
  int64_t dim = 0, H = 0;
  DType type = DType::F32;
  ExpertSet gate, up, down;
  std::vector<float> router;  // (E, dim) f32
  Tensor router_dev{};
};

// E weights (rows, cols) of one type from fresh normal values scaled by 1/sqrt(cols); prepared on gpu too unless it
// is null (the host-only test).
ExpertSet make_experts(CudaBackend* gpu, std::vector<DeviceBuffer>& keep, DType type, int E, int64_t rows,
                       int64_t cols, uint32_t seed) {
  ExpertSet ex;
  ex.bytes.resize(size_t(E));
  for (int e = 0; e < E; ++e) {
    const std::vector<float> v = random_floats(size_t(rows * cols), seed + uint32_t(e), 1.0f / std::sqrt(float(cols)));
    std::vector<uint8_t>& b = ex.bytes[size_t(e)];
    b.resize(size_t(rows) * row_bytes(type, cols));
    for (int64_t r = 0; r < rows; ++r)
      quantize_row(type, v.data() + r * cols, b.data() + size_t(r) * row_bytes(type, cols), cols);
    ex.host.push_back(Tensor::make(type, {rows, cols}, b.data()));
    if (gpu != nullptr) ex.dev.push_back(gpu->prepare_weight(ex.host.back(), keep));
  }
  return ex;
}
MoeCase make_case(CudaBackend* gpu, std::vector<DeviceBuffer>& keep, DType type, int E, int64_t dim, int64_t H,
                  uint32_t seed) {
  MoeCase c;
  c.E = E;
  c.dim = dim;
  c.H = H;
  c.type = type;
  c.gate = make_experts(gpu, keep, type, E, H, dim, seed);
  c.up = make_experts(gpu, keep, type, E, H, dim, seed + 1000);
  c.down = make_experts(gpu, keep, type, E, dim, H, seed + 2000);
  // router logits of std ~2: a clear top-k most of the time, as a trained router gives
  c.router = random_floats(size_t(E) * size_t(dim), seed + 3000, 2.0f / std::sqrt(float(dim)));
  if (gpu != nullptr) c.router_dev = gpu->prepare_weight(Tensor::make(DType::F32, {E, dim}, c.router.data()), keep);
  return c;
}
std::vector<float> run_cpu(CpuBackend& cpu, MoeCase& c, std::vector<float>& x, int64_t n, int k, MoeNorm norm) {
  std::vector<float> out(size_t(n * c.dim), std::numeric_limits<float>::quiet_NaN());
  cpu.moe_ffn({.out = Tensor::make(DType::F32, {n, c.dim}, out.data()),
               .x = Tensor::make(DType::F32, {n, c.dim}, x.data()),
               .router = Tensor::make(DType::F32, {c.E, c.dim}, c.router.data()), .gate_exps = c.gate.host,
               .up_exps = c.up.host, .down_exps = c.down.host, .top_k = k, .norm = norm});
  return out;
}

// The f32 CPU reference's routing (router logits by dot_ref, route_moe: the same bits) with the grouped GEMM's
// roundings: every expert dot over bf16-rounded decoded weights and bf16-rounded activations (x for gate and up,
// h for down), summed in double; SwiGLU and the combine in f32 as the reference computes them.
std::vector<float> run_bf16_reference(const MoeCase& c, const std::vector<float>& x, int64_t n, int k, MoeNorm norm) {
  const int64_t dim = c.dim, H = c.H;
  std::vector<float> logits(size_t(n) * size_t(c.E));
  for (int64_t t = 0; t < n; ++t)
    for (int e = 0; e < c.E; ++e)
      logits[size_t(t) * size_t(c.E) + size_t(e)] =
          dot_ref(DType::F32, c.router.data() + size_t(e) * size_t(dim), x.data() + t * dim, dim);
  const MoeRoutes r = route_moe(logits.data(), n, c.E, k, norm);
  const auto rounded = [](const float* v, int64_t len) {
    std::vector<double> out(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) out[size_t(i)] = bf16_to_f32(f32_to_bf16(v[i]));
    return out;
  };
  // expert e's weights of one projection, decoded and rounded: (rows, cols) row-major
  std::map<std::pair<int, int>, std::vector<double>> weights;
  const auto weight = [&](int proj, int e) -> const std::vector<double>& {
    std::vector<double>& w = weights[{proj, e}];
    if (w.empty()) {
      const Tensor& t = (proj == 0 ? c.gate : proj == 1 ? c.up : c.down).host[size_t(e)];
      std::vector<float> f(size_t(t.rows() * t.cols()));
      for (int64_t i = 0; i < t.rows(); ++i) dequantize_row(t.dtype, t.row(i), f.data() + i * t.cols(), t.cols());
      w = rounded(f.data(), int64_t(f.size()));
    }
    return w;
  };
  const auto dot = [](const double* w, const std::vector<double>& v) {
    double s = 0;
    for (size_t i = 0; i < v.size(); ++i) s += w[i] * v[i];
    return s;
  };
  std::vector<float> out(size_t(n * dim), 0.0f), h(static_cast<size_t>(H));
  for (int64_t t = 0; t < n; ++t) {
    const std::vector<double> xr = rounded(x.data() + t * dim, dim);
    for (int j = 0; j < k; ++j) {
      const size_t slot = size_t(t) * size_t(k) + size_t(j);
      const int e = r.expert[slot];
      const std::vector<double>&wg = weight(0, e), &wu = weight(1, e), &wd = weight(2, e);
      for (int64_t i = 0; i < H; ++i) {
        const float g = float(dot(wg.data() + i * dim, xr)), u = float(dot(wu.data() + i * dim, xr));
        h[size_t(i)] = g / (1.0f + std::exp(-g)) * u;
      }
      const std::vector<double> hr = rounded(h.data(), H);
      for (int64_t d = 0; d < dim; ++d) out[size_t(t * dim + d)] += r.weight[slot] * float(dot(wd.data() + d * H, hr));
    }
  }
  return out;
}

class CudaMoeTest : public CudaOpsTest {
 protected:
  MoeCase make_case(DType type, int E, int64_t dim, int64_t H, uint32_t seed) {
    return test::make_case(gpu_.get(), keep_, type, E, dim, H, seed);
  }
  std::vector<float> run_cpu(MoeCase& c, std::vector<float>& x, int64_t n, int k, MoeNorm norm) {
    return test::run_cpu(cpu_, c, x, n, k, norm);
  }
  MoeFfnArgs gpu_args(MoeCase& c, const Tensor& out, const Tensor& x, int k, MoeNorm norm) {
    return {.out = out, .x = x, .router = c.router_dev, .gate_exps = c.gate.dev, .up_exps = c.up.dev,
            .down_exps = c.down.dev, .top_k = k, .norm = norm};
  }
  // The op on n fresh tokens: the CPU reference against the GPU (twice: same bits).
  void check(MoeCase& c, int64_t n, int k, MoeNorm norm, uint32_t seed) {
    std::vector<float> x = random_floats(size_t(n * c.dim), seed);
    const std::vector<float> want = run_cpu(c, x, n, k, norm);
    const Tensor xd = upload(DType::F32, {n, c.dim}, x);
    const Tensor out = poisoned({n, c.dim});
    gpu_->moe_ffn(gpu_args(c, out, xd, k, norm));
    const std::vector<float> got = download(out);
    const Tensor out2 = poisoned({n, c.dim});
    gpu_->moe_ffn(gpu_args(c, out2, xd, k, norm));
    const std::vector<float> got2 = download(out2);
    const std::string what = fmt::format("{} E{} top-{} n={} {}", dtype_name(c.type), c.E, k, n, moe_norm_name(norm));
    const double err = rel_l2(got, want);
    EXPECT_LE(err, tolerance(n)) << what;  // NaN (an unwritten element) fails too
    EXPECT_EQ(std::memcmp(got.data(), got2.data(), got.size() * 4), 0) << what << ": two runs differ";
    if (!runs_gemm(n)) {
      std::printf("  %-40s rel L2 %.2e\n", what.c_str(), err);
    } else {
      const double err_bf16 = rel_l2(got, run_bf16_reference(c, x, n, k, norm));
      EXPECT_LE(err_bf16, kGemmBf16Tol) << what << " (against the bf16-rounded reference)";
      std::printf("  %-40s rel L2 %.2e (bf16-rounded reference: %.2e)\n", what.c_str(), err, err_bf16);
    }
  }
};

TEST_F(CudaMoeTest, MatchesCpuReferenceOverTokensTopKExpertsAndTypes) {
  uint32_t seed = 11;
  for (const DType type : {DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K})
    for (const int E : {8, 128}) {
      MoeCase c = make_case(type, E, 256, 256, seed += 10000);
      for (const int k : {2, 8})
        for (const int64_t n : {1, 2, 7, 16, 64, 300})
          check(c, n, k, k == 2 ? MoeNorm::Renormalize : MoeNorm::Softmax, ++seed);
    }
}

TEST_F(CudaMoeTest, EveryNativeTypeOnBothPaths) {
  uint32_t seed = 500;
  for (const DType type : {DType::F32, DType::F16, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K,
                           DType::Q5_K, DType::Q6_K}) {
    MoeCase c = make_case(type, 8, 256, 512, seed += 10000);
    for (const int64_t n : {3, 40}) check(c, n, 2, MoeNorm::Renormalize, ++seed);
  }
  // Shapes that are not whole k-tiles of the grouped GEMM (dim 64, hidden 96: its last tile is partial)
  for (const DType type : {DType::BF16, DType::Q8_0}) {
    MoeCase c = make_case(type, 8, 64, 96, seed += 10000);
    for (const int64_t n : {1, 5, 33}) check(c, n, 2, MoeNorm::Softmax, ++seed);
  }
}

TEST_F(CudaMoeTest, RoutingAndGroupingMatchRouteMoe) {
  for (const int E : {8, 128})
    for (const int k : {2, 8})
      for (const int64_t n : {1, 7, 300}) {
        const std::vector<float> logits = random_floats(size_t(n) * size_t(E), uint32_t(E * 1000 + k * 10 + n), 2.0f);
        for (const MoeNorm norm : {MoeNorm::Softmax, MoeNorm::Renormalize}) {
          const MoeRoutes r = route_moe(logits.data(), n, E, k, norm);
          const int64_t ns = n * k, max_tiles = cuda_ops::moe_max_tiles(ns, E, cuda_ops::kMoeGemmTileM);
          const Tensor l = upload(DType::F32, {n, int64_t(E)}, logits);
          const Tensor expert = upload(DType::I32, {ns}, nullptr), weight = upload(DType::F32, {ns}, nullptr);
          const Tensor offsets = upload(DType::I32, {E + 1}, nullptr), slots = upload(DType::I32, {ns}, nullptr);
          const Tensor active = upload(DType::I32, {int64_t(E)}, nullptr), counts = upload(DType::I32, {2}, nullptr);
          const Tensor te = upload(DType::I32, {max_tiles}, nullptr), tb = upload(DType::I32, {max_tiles}, nullptr);
          const std::vector<uint8_t> no_errors(sizeof(cuda_ops::DeviceErrors), 0);
          const Tensor errors = upload(DType::I8, {int64_t(no_errors.size())}, no_errors);
          auto* err = static_cast<cuda_ops::DeviceErrors*>(errors.data);
          cuda_ops::moe_route({.logits = l.ptr<float>(), .expert = expert.ptr<int32_t>(), .weight = weight.ptr<float>(),
                               .n = n, .n_experts = E, .top_k = k, .renormalize = norm == MoeNorm::Renormalize,
                               .errors = err},
                              gpu_->stream());
          cuda_ops::moe_group({.expert = expert.ptr<int32_t>(), .offsets = offsets.ptr<int32_t>(),
                               .slots = slots.ptr<int32_t>(), .active = active.ptr<int32_t>(),
                               .tile_expert = te.ptr<int32_t>(), .tile_begin = tb.ptr<int32_t>(),
                               .counts = counts.ptr<int32_t>(), .n_slots = int32_t(ns), .n_experts = E,
                               .tile_rows = cuda_ops::kMoeGemmTileM, .errors = err},
                              gpu_->stream());
          const auto ints = [&](const Tensor& t) {
            std::vector<int32_t> v(size_t(t.numel()));
            gpu_->copy_to_host(v.data(), t, v.size() * 4);
            return v;
          };
          const std::string what = fmt::format("E{} top-{} n={} {}", E, k, n, moe_norm_name(norm));
          EXPECT_EQ(ints(expert), r.expert) << what;
          const std::vector<float> w = download(weight);
          for (size_t s = 0; s < w.size(); ++s) EXPECT_NEAR(w[s], r.weight[s], 1e-6f) << what << " slot " << s;
          EXPECT_EQ(ints(offsets), r.offsets) << what;
          const std::vector<int32_t> got_slots = ints(slots), cnt = ints(counts), act = ints(active);
          std::vector<int32_t> want_active;
          for (int e = 0; e < E; ++e) {
            if (r.count(e) > 0) want_active.push_back(e);
            const auto b = size_t(r.offsets[size_t(e)]), end = size_t(r.offsets[size_t(e) + 1]);
            EXPECT_EQ(std::multiset<int32_t>(got_slots.begin() + b, got_slots.begin() + end),
                      std::multiset<int32_t>(r.slots.begin() + b, r.slots.begin() + end))
                << what << " expert " << e;
          }
          ASSERT_EQ(cnt[0], int32_t(want_active.size())) << what;
          EXPECT_EQ(std::vector<int32_t>(act.begin(), act.begin() + cnt[0]), want_active) << what;
          // tiles: each expert's groups in kMoeGemmTileM steps, experts ascending
          std::vector<std::pair<int32_t, int32_t>> want_tiles;
          for (int e = 0; e < E; ++e)
            for (int32_t b = r.offsets[size_t(e)]; b < r.offsets[size_t(e) + 1]; b += cuda_ops::kMoeGemmTileM)
              want_tiles.emplace_back(e, b);
          ASSERT_EQ(cnt[1], int32_t(want_tiles.size())) << what;
          ASSERT_LE(cnt[1], max_tiles) << what;
          const std::vector<int32_t> got_te = ints(te), got_tb = ints(tb);
          for (size_t i = 0; i < want_tiles.size(); ++i)
            EXPECT_EQ(std::make_pair(got_te[i], got_tb[i]), want_tiles[i]) << what << " tile " << i;
          std::vector<uint8_t> err_host(no_errors.size());
          gpu_->copy_to_host(err_host.data(), errors, err_host.size());
          EXPECT_EQ(reinterpret_cast<const cuda_ops::DeviceErrors*>(err_host.data())->bits, 0u) << what;
        }
      }
}

TEST_F(CudaMoeTest, ACapturedStepReplaysOnNewInputs) {
  for (const int64_t n : {int64_t(4), int64_t(40)}) {  // the matvec and the grouped GEMM
    MoeCase c = make_case(DType::Q4_0, 8, 128, 64, 77 + uint32_t(n));
    std::vector<float> x0 = random_floats(size_t(n * c.dim), 1), x1 = random_floats(size_t(n * c.dim), 2);
    const Tensor xd = upload(DType::F32, {n, c.dim}, x0);
    const Tensor out = poisoned({n, c.dim});
    gpu_->moe_ffn(gpu_args(c, out, xd, 2, MoeNorm::Renormalize));  // sizes the scratch, builds the expert table
    EXPECT_LE(rel_l2(download(out), run_cpu(c, x0, n, 2, MoeNorm::Renormalize)), tolerance(n));
    gpu_->begin_capture();
    gpu_->moe_ffn(gpu_args(c, out, xd, 2, MoeNorm::Renormalize));
    const std::unique_ptr<StepGraph> graph = gpu_->end_capture();
    ASSERT_NE(graph, nullptr);
    gpu_->copy_to_device(xd, x1.data(), x1.size() * 4);
    ASSERT_TRUE(gpu_->replay(*graph));
    const double err = rel_l2(download(out), run_cpu(c, x1, n, 2, MoeNorm::Renormalize));
    EXPECT_LE(err, tolerance(n)) << "n=" << n;
    std::printf("  replayed graph, n=%lld: rel L2 %.2e\n", (long long)n, err);
  }
}

TEST_F(CudaMoeTest, NonFiniteRouterLogitIsOneClearError) {
  MoeCase c = make_case(DType::BF16, 8, 64, 64, 9);
  std::vector<float> x = random_floats(size_t(2 * c.dim), 3);
  x[5] = std::numeric_limits<float>::infinity();
  const Tensor xd = upload(DType::F32, {2, c.dim}, x);
  const Tensor out = poisoned({2, c.dim});
  try {
    gpu_->moe_ffn(gpu_args(c, out, xd, 2, MoeNorm::Renormalize));
    gpu_->synchronize();
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("router logit"), std::string::npos) << e.what();
  }
}

// Host only (runs without a GPU): the roundings the grouped GEMM makes, as run_bf16_reference makes them, move the
// layer's output off the f32 reference by well inside kGemmTol, and by 4x kGemmBf16Tol or more (so matching the
// bf16-rounded reference to kGemmBf16Tol says the kernel computes those products, not merely something close).
TEST(CudaMoeReference, Bf16RoundingStaysInsideTheGemmTolerance) {
  CpuBackend cpu{CpuBackendOptions{.kernels = CpuKernels::Reference, .n_threads = 0, .simd = SimdLevel::Scalar}};
  std::vector<DeviceBuffer> keep;
  uint32_t seed = 900;
  for (const DType type : {DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
    MoeCase c = make_case(nullptr, keep, type, 8, 256, 256, seed += 100);
    for (const int k : {2, 8}) {
      std::vector<float> x = random_floats(size_t(64 * c.dim), ++seed);
      const double err = rel_l2(run_bf16_reference(c, x, 64, k, MoeNorm::Softmax), run_cpu(cpu, c, x, 64, k, MoeNorm::Softmax));
      const std::string what = fmt::format("{} top-{} n=64", dtype_name(type), k);
      EXPECT_LE(err, kGemmTol / 2) << what;
      EXPECT_GE(err, 4 * kGemmBf16Tol) << what;
      std::printf("  %-24s bf16-rounded vs f32 reference: rel L2 %.2e\n", what.c_str(), err);
    }
  }
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
