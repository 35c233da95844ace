#include "workload.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace ferry::bench {

namespace {

// Log-normal with the given mean and log-space sigma, clipped to [lo, hi]. ShareGPT conversations have a
// long right tail: sigma 1.0 for prompts and 0.8 for replies puts p99 at ~6x and ~4x the median.
int lognormal_len(std::mt19937_64& rng, double mean, double sigma, int lo, int hi) {
  const double mu = std::log(std::max(mean, 1.0)) - 0.5 * sigma * sigma;
  std::lognormal_distribution<double> d(mu, sigma);
  return std::clamp(int(std::lround(d(rng))), lo, hi);
}

}  // namespace

std::vector<WorkItem> make_workload(const WorkloadOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(o.token_lo, o.token_hi - 1);
  std::vector<WorkItem> items(size_t(std::max(0, o.n_requests)));
  for (WorkItem& w : items) {
    int in = o.input_len, out = o.output_len;
    if (o.mix == LengthMix::ShareGpt) {
      in = lognormal_len(rng, o.input_len, 1.0, 4, 8 * std::max(1, o.input_len));
      out = lognormal_len(rng, o.output_len, 0.8, 4, 8 * std::max(1, o.output_len));
    }
    if (o.max_total_len > 0) {
      in = std::min(in, o.max_total_len - 2);
      out = std::max(1, std::min(out, o.max_total_len - in - 1));
    }
    w.prompt.resize(size_t(std::max(1, in)));
    for (int32_t& t : w.prompt) t = token(rng);
    w.output_len = out;
  }
  return items;
}

}  // namespace ferry::bench
