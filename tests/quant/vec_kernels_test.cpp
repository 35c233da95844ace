// The vectorized exp, SwiGLU and RMSNorm (vec_kernels.h) against double-precision references, at every
// SIMD level this CPU supports, with lengths that leave vector tails.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/vec_kernels.h"

namespace ferry {
namespace {

// Cephes-style expf: the polynomial's ~1e-7 plus float rounding; 1.16e-7 measured at every level.
constexpr double kExpRel = 1.5e-7;

TEST(VecKernels, ExpMatchesStdExpOverTheWholeRange) {
  // Dense sweep over [-87.3, 88.7] plus random points.
  std::vector<float> x;
  for (double v = -87.3; v <= 88.7; v += 0.00137) x.push_back(float(v));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-87.3f, 88.7f);
  for (int i = 0; i < 20000; ++i) x.push_back(u(rng));
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 0.5f * float(M_LN2), -0.5f * float(M_LN2), 1.0f, -1.0f}) x.push_back(v);
  for (SimdLevel level : supported_simd_levels()) {
    const VecKernels k = select_vec_kernels(level);
    std::vector<float> y(x.size());
    k.exp(x.data(), y.data(), int64_t(x.size()));
    double worst = 0;
    float worst_x = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double ref = std::exp(double(x[i]));
      const double rel = std::fabs(double(y[i]) - ref) / ref;
      if (rel > worst) worst = rel, worst_x = x[i];
    }
    EXPECT_LE(worst, kExpRel) << simd_level_name(level) << " at x = " << worst_x;
    std::printf("  %s: exp max relative error %.3g (x = %g)\n", std::string(simd_level_name(level)).c_str(), worst,
                worst_x);
  }
}

TEST(VecKernels, ExpEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {-inf, -1000.0f, -104.0f, -88.0f, 89.0f, 1000.0f, inf};
  for (SimdLevel level : supported_simd_levels()) {
    const VecKernels k = select_vec_kernels(level);
    std::vector<float> y(x.size());
    k.exp(x.data(), y.data(), int64_t(x.size()));
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_GE(y[i], 0.0f) << simd_level_name(level) << " x " << x[i];
      EXPECT_LE(y[i], 1.2e-38f) << simd_level_name(level) << " x " << x[i];  // below FLT_MIN
    }
    EXPECT_EQ(y[0], 0.0f) << simd_level_name(level) << ": exp(-inf) must be exactly 0 (masked keys)";
    for (size_t i = 4; i < x.size(); ++i) EXPECT_EQ(y[i], inf) << simd_level_name(level) << " x " << x[i];
  }
}

std::vector<float> random_floats(size_t n, uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double rel_l2(const std::vector<float>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

TEST(VecKernels, SwigluMatchesDouble) {
  for (int64_t n : {1, 7, 16, 100, 1536, 1537}) {
    const std::vector<float> g = random_floats(size_t(n), uint32_t(n), 6.0f), up = random_floats(size_t(n), 9, 1.0f);
    std::vector<double> ref(static_cast<size_t>(n));
    for (size_t i = 0; i < ref.size(); ++i) ref[i] = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * up[i];
    for (SimdLevel level : supported_simd_levels()) {
      std::vector<float> out(static_cast<size_t>(n));
      select_vec_kernels(level).swiglu(out.data(), g.data(), up.data(), n);
      EXPECT_LE(rel_l2(out, ref), 1e-6) << simd_level_name(level) << " n " << n;
    }
  }
}

TEST(VecKernels, RmsNormAndAddRmsNormMatchDouble) {
  const float eps = 1e-5f;
  for (int64_t n : {1, 13, 64, 576, 4099}) {
    const std::vector<float> x = random_floats(size_t(n), uint32_t(n), 3.0f), w = random_floats(size_t(n), 7, 1.0f);
    const std::vector<float> delta = random_floats(size_t(n), 8, 1.0f);
    auto norm_ref = [&](const std::vector<double>& v) {
      double ss = 0;
      for (double a : v) ss += a * a;
      const double s = 1.0 / std::sqrt(ss / double(n) + eps);
      std::vector<double> r(v.size());
      for (size_t i = 0; i < v.size(); ++i) r[i] = v[i] * s * w[i];
      return r;
    };
    std::vector<double> xd(x.begin(), x.end()), sumd(static_cast<size_t>(n));
    for (size_t i = 0; i < sumd.size(); ++i) sumd[i] = double(x[i] + delta[i]);  // the float residual add
    for (SimdLevel level : supported_simd_levels()) {
      const VecKernels k = select_vec_kernels(level);
      std::vector<float> out(static_cast<size_t>(n));
      k.rms_norm(out.data(), x.data(), w.data(), n, eps);
      EXPECT_LE(rel_l2(out, norm_ref(xd)), 1e-6) << simd_level_name(level) << " n " << n;
      std::vector<float> res = x;
      k.add_rms_norm(out.data(), res.data(), delta.data(), w.data(), n, eps);
      for (size_t i = 0; i < res.size(); ++i) ASSERT_EQ(res[i], x[i] + delta[i]) << simd_level_name(level);
      EXPECT_LE(rel_l2(out, norm_ref(sumd)), 1e-6) << simd_level_name(level) << " n " << n;
    }
  }
}

}  // namespace
}  // namespace ferry
