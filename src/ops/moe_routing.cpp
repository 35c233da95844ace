#include "ops/moe_routing.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace ferry {

const char* moe_norm_name(MoeNorm n) { return n == MoeNorm::Softmax ? "softmax" : "renormalize"; }

MoeRoutes route_moe(const float* logits, int64_t n, int n_experts, int top_k, MoeNorm norm) {
  FERRY_CHECK(n_experts > 0 && top_k >= 1 && top_k <= n_experts, "moe routing: top-{} of {} experts", top_k, n_experts);
  MoeRoutes r;
  r.n_tokens = n;
  r.top_k = top_k;
  r.n_experts = n_experts;
  r.expert.resize(size_t(n) * size_t(top_k));
  r.weight.resize(size_t(n) * size_t(top_k));
  std::vector<float> p(static_cast<size_t>(n_experts));
  std::vector<int32_t> order(static_cast<size_t>(n_experts));
  for (int64_t t = 0; t < n; ++t) {
    const float* z = logits + t * n_experts;
    // softmax in float with the max subtracted (transformers: softmax(router_logits, dtype=float))
    float mx = z[0];
    for (int e = 0; e < n_experts; ++e) {
      FERRY_CHECK(std::isfinite(z[e]), "moe routing: router logit {} of token {} is {}", e, t, z[e]);
      mx = std::max(mx, z[e]);
    }
    float sum = 0;
    for (int e = 0; e < n_experts; ++e) sum += p[size_t(e)] = std::exp(z[e] - mx);
    for (int e = 0; e < n_experts; ++e) p[size_t(e)] /= sum;
    for (int e = 0; e < n_experts; ++e) order[size_t(e)] = e;
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
      return p[size_t(a)] > p[size_t(b)] || (p[size_t(a)] == p[size_t(b)] && a < b);
    });
    float chosen = 0;
    for (int j = 0; j < top_k; ++j) chosen += p[size_t(order[size_t(j)])];
    for (int j = 0; j < top_k; ++j) {
      const size_t s = size_t(t) * size_t(top_k) + size_t(j);
      r.expert[s] = order[size_t(j)];
      r.weight[s] = norm == MoeNorm::Renormalize ? p[size_t(order[size_t(j)])] / chosen : p[size_t(order[size_t(j)])];
    }
  }
  // counting sort of the slots by expert (stable: token order within an expert)
  r.offsets.assign(size_t(n_experts) + 1, 0);
  for (int32_t e : r.expert) ++r.offsets[size_t(e) + 1];
  for (int e = 0; e < n_experts; ++e) r.offsets[size_t(e) + 1] += r.offsets[size_t(e)];
  r.slots.resize(r.expert.size());
  std::vector<int32_t> fill(r.offsets.begin(), r.offsets.end() - 1);
  for (size_t s = 0; s < r.expert.size(); ++s) r.slots[size_t(fill[size_t(r.expert[s])]++)] = int32_t(s);
  return r;
}

}  // namespace ferry
