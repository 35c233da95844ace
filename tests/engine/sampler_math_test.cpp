// The sampler's building blocks on their own: exp_nonpositive, argmax, select_top_k, select_top_p.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "sampling/sampler_math.h"
#include "sampling/top_k.h"

namespace ferry {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(SamplerMath, ExpNonpositiveWithin2Ulp) {
  double worst = 0.0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -87.0f * float(i) / 2000000.0f + 1e-6f * float(i % 7);  // not only grid points
    if (x > 0.0f || x <= -87.0f) continue;
    const double want = std::exp(double(x));
    const double got = exp_nonpositive(x);
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);  // one float ulp at want
    worst = std::max(worst, std::abs(got - want) / ulp);
  }
  EXPECT_LE(worst, 2.0) << "worst error in float ulps";
  EXPECT_EQ(exp_nonpositive(0.0f), 1.0f);  // exactly: the max logit's weight
  EXPECT_EQ(exp_nonpositive(-87.0f), 0.0f);
  EXPECT_EQ(exp_nonpositive(-1000.0f), 0.0f);
  EXPECT_EQ(exp_nonpositive(-kInf), 0.0f);
  EXPECT_EQ(exp_nonpositive(kNaN), 0.0f);
  EXPECT_GT(exp_nonpositive(-86.9f), 0.0f);
}

TEST(SamplerMath, SumLanesMatchesDoubleSum) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(0.0f, 1.0f);
  for (const size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(1001)}) {
    std::vector<float> w(n);
    for (float& x : w) x = d(rng);
    double want = 0.0;
    for (float x : w) want += x;
    EXPECT_NEAR(sum_lanes(w.data(), n), want, 1e-12 * (1.0 + want)) << "n " << n;
  }
}

TEST(TopK, ArgmaxFirstLargestIgnoringNaN) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const size_t n : {size_t(1), size_t(5), size_t(31), size_t(32), size_t(33), size_t(1000), size_t(4099)}) {
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    for (size_t i = 0; i < n; i += 3) v[i] = kNaN;
    int32_t want = -1;
    for (size_t i = 0; i < n; ++i) {
      if (!std::isnan(v[i]) && (want < 0 || v[i] > v[size_t(want)])) want = int32_t(i);
    }
    EXPECT_EQ(argmax(v), want) << "n " << n;
    if (want >= 0 && n > 4) {
      v[n - 1] = v[size_t(want)];  // a tie later on: the first one still wins
      EXPECT_EQ(argmax(v), want);
    }
  }
  EXPECT_EQ(argmax(std::vector<float>{kNaN, -kInf, kNaN}), -1);
  EXPECT_EQ(argmax(std::vector<float>{}), -1);
  EXPECT_EQ(argmax(std::vector<float>{-kInf, kInf, 3.0f, kInf}), 1);
}

TEST(TopK, SelectTopKMatchesFullSort) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const auto n = size_t(1 + rng() % 3000);
    const auto k = int32_t(1 + rng() % 100);
    std::vector<float> v(n);
    for (float& x : v) x = float(int(rng() % 50)) * 0.25f;  // many ties
    for (size_t i = 0; i < n; i += 1 + rng() % 20) v[i] = (rng() % 2) ? kNaN : -kInf;
    std::vector<Candidate> want;
    for (size_t i = 0; i < n; ++i) {
      if (v[i] > -kInf) want.push_back({int32_t(i), v[i], 0.0f});
    }
    std::sort(want.begin(), want.end(), ranks_before);
    want.resize(std::min(want.size(), size_t(k)));
    std::vector<Candidate> got;
    select_top_k(v, k, got);
    ASSERT_EQ(got.size(), want.size()) << "trial " << trial;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].id, want[i].id) << "trial " << trial << " rank " << i;
      EXPECT_EQ(got[i].logit, want[i].logit);
    }
  }
}

TEST(TopP, SelectTopPMatchesSortedWalk) {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 200; ++trial) {
    const auto n = size_t(1 + rng() % 5000);
    std::vector<Candidate> c(n);
    std::normal_distribution<float> d(0.0f, trial % 2 ? 0.3f : 3.0f);  // flat and peaky
    for (size_t i = 0; i < n; ++i) {
      c[i].id = int32_t(i);
      c[i].logit = trial % 5 == 0 ? float(int(rng() % 8)) : d(rng);  // some trials all ties
    }
    const float max_logit = std::max_element(c.begin(), c.end(), [](auto& a, auto& b) {
                              return a.logit < b.logit;
                            })->logit;
    double total = 0;
    for (Candidate& x : c) total += x.weight = std::exp(x.logit - max_logit);
    const double target = (0.05 + 0.9 * double(rng() % 1000) / 1000.0) * total;

    std::vector<Candidate> sorted = c;
    std::sort(sorted.begin(), sorted.end(), ranks_before);
    size_t want = n;
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += sorted[i].weight;
      if (cum >= target) {
        want = i + 1;
        break;
      }
    }
    std::shuffle(c.begin(), c.end(), rng);
    const size_t got = select_top_p(c, target, /*ranked=*/false);
    ASSERT_EQ(got, want) << "trial " << trial << " n " << n;
    std::vector<int32_t> got_ids, want_ids;
    for (size_t i = 0; i < got; ++i) got_ids.push_back(c[i].id);
    for (size_t i = 0; i < want; ++i) want_ids.push_back(sorted[i].id);
    std::sort(got_ids.begin(), got_ids.end());
    std::sort(want_ids.begin(), want_ids.end());
    EXPECT_EQ(got_ids, want_ids) << "trial " << trial;
    EXPECT_EQ(select_top_p(sorted, target, /*ranked=*/true), want);
  }
}

}  // namespace
}  // namespace ferry
