// The sampler's fast draw (block sums, one block walked) against its definition (the sequential walk), and
// the fused sum against sum_lanes: bit for bit, on random weights including zeros, sizes with ragged tails,
// and targets placed exactly on (and one ulp around) cumulative sums, where only the exact fallback decides.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/sampler_math.h"

namespace ferry {
namespace {

TEST(SamplerDraw, BlockedDrawMatchesSequentialDefinition) {
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<float> logit(-30.0f, 0.0f);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int64_t checked = 0;
  for (const size_t n : {size_t(1), size_t(7), size_t(8), size_t(511), size_t(512), size_t(513), size_t(4099),
                         size_t(128256)}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<float> w(n);  // (n) weights in [0, 1], some exactly 0, one exactly 1
      for (float& x : w) x = unit(rng) < 0.2 ? 0.0f : exp_nonpositive(logit(rng));
      w[rng() % n] = 1.0f;
      std::vector<double> blocks;
      const double total = sum_with_blocks(w.data(), n, blocks);
      ASSERT_EQ(total, sum_lanes(w.data(), n)) << "n " << n;
      ASSERT_EQ(blocks.size(), (n + kDrawBlock - 1) / kDrawBlock);
      std::vector<double> targets = {0.0, total, std::nextafter(total, 0.0), unit(rng) * 1e-14 * total};
      for (int i = 0; i < 200; ++i) targets.push_back(unit(rng) * total);
      double cum = 0.0;  // targets exactly on the sequential cumulative sums, and one ulp around them
      for (size_t i = 0; i < n; i += 1 + rng() % (n / 16 + 1)) {
        cum = 0.0;
        for (size_t j = 0; j <= i; ++j) cum += w[j];
        targets.insert(targets.end(), {cum, std::nextafter(cum, 0.0), std::nextafter(cum, 2.0 * total)});
      }
      for (const double t : targets) {
        ASSERT_EQ(draw_blocked(w.data(), n, t, total, blocks), draw_sequential(w.data(), n, t))
            << "n " << n << " target " << t << " total " << total;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 8000);
}

}  // namespace
}  // namespace ferry
