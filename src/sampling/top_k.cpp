#include "sampling/top_k.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace ferry {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr size_t kChunk = 32;

// chunk: (kChunk) f32. Written as a count so the compiler vectorizes it (no early exit, no float reduction).
bool any_above(const float* chunk, float threshold) {
  int32_t count = 0;
  for (size_t j = 0; j < kChunk; ++j) count += chunk[j] > threshold ? 1 : 0;
  return count != 0;
}

bool any_equal(const float* chunk, float value) {
  int32_t count = 0;
  for (size_t j = 0; j < kChunk; ++j) count += chunk[j] == value ? 1 : 0;
  return count != 0;
}

}  // namespace

int32_t argmax(std::span<const float> logits) {
  // Eight independent running maxima (vectorizable without reassociating anything), then the first match.
  constexpr size_t kLanes = 8;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, kNegInf);
  const size_t n = logits.size();
  const float* p = logits.data();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lane[j] = p[i + j] > lane[j] ? p[i + j] : lane[j];  // NaN loses
  }
  float best = kNegInf;
  for (; i < n; ++i) best = p[i] > best ? p[i] : best;
  for (const float l : lane) best = l > best ? l : best;
  if (best == kNegInf) return -1;
  i = 0;
  for (; i + kChunk <= n && !any_equal(p + i, best); i += kChunk) {
  }
  for (; i < n; ++i) {
    if (p[i] == best) return static_cast<int32_t>(i);
  }
  return -1;  // unreachable: best is one of the entries
}

void select_top_k(std::span<const float> logits, int32_t k, std::vector<Candidate>& out) {
  out.clear();
  if (k <= 0) return;
  const size_t n = logits.size();
  const size_t cap = std::min(static_cast<size_t>(k), n);
  out.reserve(cap);
  // A heap whose front is the worst kept entry (ranks_before as "less" makes the max the worst).
  size_t i = 0;
  for (; i < n && out.size() < cap; ++i) {
    if (!(logits[i] > kNegInf)) continue;  // -inf and NaN are never kept
    out.push_back({static_cast<int32_t>(i), logits[i], 0.0f});
    std::push_heap(out.begin(), out.end(), ranks_before);
  }
  if (out.size() < cap) {  // fewer than k finite logits: all of them
    std::sort(out.begin(), out.end(), ranks_before);
    return;
  }
  // Scanning ids upwards, an entry whose logit equals the worst kept one never ranks before it, so "l > worst"
  // is the whole test (false for NaN too). Most chunks hold nothing better: one vectorized compare skips them.
  float worst = out.front().logit;
  while (i < n) {
    const size_t end = std::min(n, i + kChunk);
    if (end - i == kChunk && !any_above(logits.data() + i, worst)) {
      i = end;
      continue;
    }
    for (; i < end; ++i) {
      if (logits[i] > worst) {
        std::pop_heap(out.begin(), out.end(), ranks_before);
        out.back() = {static_cast<int32_t>(i), logits[i], 0.0f};
        std::push_heap(out.begin(), out.end(), ranks_before);
        worst = out.front().logit;
      }
    }
  }
  std::sort_heap(out.begin(), out.end(), ranks_before);  // best first
}

size_t select_top_p(std::span<Candidate> cand, double target, bool ranked) {
  const auto first = cand.begin();
  size_t lo = 0, hi = cand.size();  // cand[0, lo) ranks before cand[lo, hi), which ranks before cand[hi, n)
  double before = 0.0;              // weight of cand[0, lo); always < target
  if (!ranked) {
    constexpr size_t kSmall = 64;
    int32_t budget = 2 * static_cast<int32_t>(std::bit_width(cand.size())) + 8;
    while (hi - lo > kSmall && budget-- > 0) {
      Candidate a = cand[lo], b = cand[lo + (hi - lo) / 2], c = cand[hi - 1];  // median of three
      if (ranks_before(b, a)) std::swap(a, b);
      if (ranks_before(c, b)) b = ranks_before(c, a) ? a : c;
      const Candidate pivot = b;
      const auto mid = std::partition(first + lo, first + hi,
                                      [&](const Candidate& x) { return ranks_before(x, pivot); });
      std::iter_swap(mid, std::find_if(mid, first + hi, [&](const Candidate& x) { return x.id == pivot.id; }));
      const auto m = static_cast<size_t>(mid - first);  // cand[m] is the pivot now
      double left = 0.0;
      for (size_t i = lo; i < m; ++i) left += cand[i].weight;
      if (before + left >= target) {
        hi = m;
      } else if (before + left + pivot.weight >= target) {
        return m + 1;
      } else {
        before += left + pivot.weight;
        lo = m + 1;
      }
    }
    std::sort(first + lo, first + hi, ranks_before);
  }
  double mass = before;
  for (size_t i = lo; i < hi; ++i) {
    mass += cand[i].weight;
    if (mass >= target) return i + 1;
  }
  return hi;  // only when rounding kept the sum below target: everything up to hi
}

}  // namespace ferry
