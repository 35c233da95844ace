#include "sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "core/check.h"
#include "sampling/philox.h"
#include "sampling/sampler_math.h"

namespace ferry {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kMaxFloat = std::numeric_limits<float>::max();

// +inf counts as the largest float (NaN is skipped by every consumer before it gets here).
float finite_top(float l) { return l > kMaxFloat ? kMaxFloat : l; }

// 1 / T, capped at the largest float so that (logit - max_logit) * inv_t is 0 (weight 1) for the max and
// never 0 * inf, however small T is.
float inverse_temperature(float temperature) { return std::min(1.0f / temperature, kMaxFloat); }

// exp((logit - max_logit) / T) for one raw logit: 0 for NaN and -inf. max_logit is finite and >= every
// logit. Branch-free, so the dense path's loop over the vocabulary vectorizes.
float weight_of(float logit, float max_logit, float inv_t) {
  return exp_nonpositive((finite_top(logit) - max_logit) * inv_t);  // NaN, -inf -> 0
}

// w[i] = weight_of(src[i], max_logit, inv_t) over (n) f32. Also compiled for AVX2 (8 lanes instead of
// SSE2's 4; no FMA, so the same roundings and the same weights bit for bit), used when the CPU has it.
void dense_weights_generic(const float* src, float* w, size_t n, float max_logit, float inv_t) {
  for (size_t i = 0; i < n; ++i) w[i] = weight_of(src[i], max_logit, inv_t);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) void dense_weights_avx2(const float* src, float* w, size_t n, float max_logit,
                                                        float inv_t) {
  for (size_t i = 0; i < n; ++i) w[i] = weight_of(src[i], max_logit, inv_t);
}
#endif

void dense_weights(const float* src, float* w, size_t n, float max_logit, float inv_t) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2")) return dense_weights_avx2(src, w, n, max_logit, inv_t);
#endif
  dense_weights_generic(src, w, n, max_logit, inv_t);
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size) : params_(params), vocab_size_(vocab_size) {
  params_.validate();
  FERRY_CHECK(vocab_size > 0, "sampler: vocab_size must be > 0, got {}", vocab_size);
  counts_.assign(static_cast<size_t>(vocab_size), 0);
}

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> history) {
  FERRY_CHECK(logits.size() == static_cast<size_t>(vocab_size_),
              "sampler: logits have {} entries, vocab_size is {}", logits.size(), vocab_size_);
  if (!params_.penalties_active()) return;
  size_t window = history.size();
  if (params_.penalty_last_n >= 0) window = std::min(window, static_cast<size_t>(params_.penalty_last_n));
  const std::span<const int32_t> recent = history.last(window);

  touched_.clear();
  for (const int32_t t : recent) {
    if (t < 0 || t >= vocab_size_) {
      for (const int32_t u : touched_) counts_[u] = 0;  // leave the scratch clean for the next call
      fail("sampler: history token {} is outside the vocabulary [0, {})", t, vocab_size_);
    }
    if (counts_[t]++ == 0) touched_.push_back(t);
  }
  const float rep = params_.repetition_penalty;
  for (const int32_t t : touched_) {
    float l = logits[t];
    if (rep != 1.0f) l = l > 0.0f ? l / rep : l * rep;  // once per token, however often it occurred
    l -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(counts_[t]);
    logits[t] = l;
    counts_[t] = 0;
  }
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  FERRY_CHECK(logits.size() == static_cast<size_t>(vocab_size_),
              "sampler: logits have {} entries, vocab_size is {}", logits.size(), vocab_size_);
  // Everything below reads NaN as "never" (comparisons with NaN are false) and +inf as the largest float,
  // so the logits are copied only when penalties must change some of them.
  std::span<const float> src = logits;
  if (params_.penalties_active()) {
    work_.assign(logits.begin(), logits.end());
    apply_penalties(work_, history);
    src = work_;
  }
  if (params_.temperature == 0.0f) return sample_greedy(src);
  if (params_.top_k > 0 && params_.top_k < vocab_size_) return sample_sparse(src, history.size());
  return sample_dense(src, history.size());
}

int32_t Sampler::sample_at(std::span<const float> logits, uint64_t position) {
  FERRY_CHECK(!params_.penalties_active(), "sampler: sample_at needs the history (penalties are on)");
  FERRY_CHECK(logits.size() == static_cast<size_t>(vocab_size_),
              "sampler: logits have {} entries, vocab_size is {}", logits.size(), vocab_size_);
  if (params_.temperature == 0.0f) return sample_greedy(logits);
  if (params_.top_k > 0 && params_.top_k < vocab_size_) return sample_sparse(logits, position);
  return sample_dense(logits, position);
}

void Sampler::set_params(const SamplingParams& params) {
  params.validate();
  params_ = params;
  last_path_ = Path::kNone;
}

int32_t Sampler::sample_greedy(std::span<const float> logits) {
  const int32_t best = argmax(logits);  // ties -> lowest id
  FERRY_CHECK(best >= 0, "sampler: every logit is NaN or -inf, nothing to sample");
  last_path_ = Path::kGreedy;
  greedy_token_ = best;
  return best;
}

// min-p and top-p each keep a best-ranked prefix, so their intersection does not depend on the order they
// run in; both paths run min-p first, which shrinks top-p's work. top-p's mass is still measured against
// the whole (top-k) distribution, as the documented order says.

int32_t Sampler::sample_sparse(std::span<const float> logits, uint64_t position) {
  select_top_k(logits, params_.top_k, cand_);  // best first
  FERRY_CHECK(!cand_.empty(), "sampler: every logit is NaN or -inf, nothing to sample");
  for (Candidate& c : cand_) c.logit = finite_top(c.logit);
  const float max_logit = cand_.front().logit;
  const float inv_t = inverse_temperature(params_.temperature);
  double total = 0.0;
  for (Candidate& c : cand_) {
    c.weight = weight_of(c.logit, max_logit, inv_t);
    total += c.weight;
  }
  if (params_.min_p > 0.0f) {
    const float min_p = params_.min_p;
    std::erase_if(cand_, [min_p](const Candidate& c) { return c.weight < min_p; });  // order kept
  }
  if (params_.top_p < 1.0f) cand_.resize(select_top_p(cand_, params_.top_p * total, /*ranked=*/true));

  // Draw in ascending id order (see the header).
  std::sort(cand_.begin(), cand_.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  dense_.resize(cand_.size());  // (n_candidates) weights in id order
  for (size_t i = 0; i < cand_.size(); ++i) dense_[i] = cand_[i].weight;
  last_path_ = Path::kSparse;
  return cand_[static_cast<size_t>(draw(dense_.data(), cand_.size(), position))].id;
}

int32_t Sampler::draw(const float* weight, size_t n, uint64_t position) {
  kept_sum_ = sum_with_blocks(weight, n, block_sums_);
  const double target = static_cast<double>(philox_uniform(params_.seed, position)) * kept_sum_;
  const int32_t i = draw_blocked(weight, n, target, kept_sum_, block_sums_);
  // u * sum can round up to the sum: then the last token with weight (the max has weight 1, so there is one).
  FERRY_ASSERT(i >= 0);
  return i;
}

double sum_with_blocks(const float* w, size_t n, std::vector<double>& blocks) {
  static_assert(kDrawBlock % 8 == 0, "blocks must hold whole 8-lane groups of sum_lanes");
  const size_t n8 = n / 8 * 8;  // sum_lanes' lanes cover [0, n8); the tail is added on its own
  const size_t n_blocks = (n + kDrawBlock - 1) / kDrawBlock;
  blocks.resize(n_blocks);
  double lane[8] = {};  // sum_lanes' lanes, in its order
  for (size_t b = 0; b < n_blocks; ++b) {
    const size_t begin = b * kDrawBlock;
    const size_t end = std::min(n, begin + kDrawBlock);
    const size_t end8 = std::min(end, n8);
    double block_lane[8] = {};
    for (size_t i = begin; i + 8 <= end8; i += 8) {
      for (size_t j = 0; j < 8; ++j) {
        lane[j] += w[i + j];
        block_lane[j] += w[i + j];
      }
    }
    double sum = 0.0;
    for (const double l : block_lane) sum += l;
    for (size_t i = std::max(begin, n8); i < end; ++i) sum += w[i];
    blocks[b] = sum;
  }
  double total = 0.0;
  for (size_t i = n8; i < n; ++i) total += w[i];
  for (const double l : lane) total += l;
  return total;
}

int32_t draw_sequential(const float* weight, size_t n, double target) {
  double cum = 0.0;
  int32_t last_positive = -1;
  for (size_t i = 0; i < n; ++i) {
    cum += weight[i];  // a zero weight never makes cum pass target for the first time
    if (cum > target) return static_cast<int32_t>(i);
    if (weight[i] > 0.0f) last_positive = static_cast<int32_t>(i);
  }
  return last_positive;
}

// The sequential cumulative sums c_i are nondecreasing (weights >= 0, rounding is monotone) and within
// gamma_i * total of the exact prefix sums; the estimates E_i (block sums, then a walk) within gamma_m *
// total, m < 2n + 64 roundings. So |c_i - E_i| <= tol, and E_{i-1} <= target - tol < target + tol < E_i
// proves c_{i-1} <= target < c_i: draw_sequential's answer. Otherwise the exact walk decides.
int32_t draw_blocked(const float* weight, size_t n, double target, double total, std::span<const double> blocks) {
  const double tol = (4.0 * static_cast<double>(n) + 256.0) * 0x1p-53 * total;
  double before = 0.0;  // E at the start of block k
  size_t k = 0;
  for (; k < blocks.size() && before + blocks[k] <= target - tol; ++k) before += blocks[k];
  if (k < blocks.size()) {
    double e = before;
    for (size_t i = k * kDrawBlock; i < n; ++i) {
      const double prev = e;
      e += weight[i];
      if (e > target + tol) {
        if (prev <= target - tol) return static_cast<int32_t>(i);
        break;  // the crossing is within rounding of target
      }
    }
  }
  return draw_sequential(weight, n, target);
}

std::vector<TokenProb> Sampler::kept() const {
  std::vector<TokenProb> out;
  switch (last_path_) {
    case Path::kNone:
      break;
    case Path::kGreedy:
      out.push_back({greedy_token_, 1.0f});
      break;
    case Path::kSparse:
    case Path::kDense:
      for (size_t i = 0; i < dense_.size(); ++i) {
        if (dense_[i] == 0.0f) continue;
        const int32_t id = last_path_ == Path::kSparse ? cand_[i].id : static_cast<int32_t>(i);
        out.push_back({id, static_cast<float>(dense_[i] / kept_sum_)});
      }
      break;
  }
  return out;
}

int32_t Sampler::sample_dense(std::span<const float> logits, uint64_t position) {
  const int32_t best = argmax(logits);
  FERRY_CHECK(best >= 0, "sampler: every logit is NaN or -inf, nothing to sample");
  const float max_logit = finite_top(logits[best]);
  const float inv_t = inverse_temperature(params_.temperature);
  const auto n = static_cast<size_t>(vocab_size_);
  dense_.resize(n);
  float* w = dense_.data();           // (vocab_size) weights
  const float* src = logits.data();   // (vocab_size) logits
  dense_weights(src, w, n, max_logit, inv_t);
  const double total = params_.top_p < 1.0f ? sum_lanes(w, n) : 0.0;  // only top-p measures against it
  if (params_.min_p > 0.0f) {
    const float min_p = params_.min_p;
    for (size_t i = 0; i < n; ++i) w[i] = w[i] < min_p ? 0.0f : w[i];
  }
  if (params_.top_p < 1.0f) apply_dense_top_p(logits, params_.top_p * total);

  last_path_ = Path::kDense;
  return draw(w, n, position);
}

// Top-p over dense_ without ranking the vocabulary: a weight's float bits (sign 0, exponent, mantissa)
// order like the weight itself, so bucketing by the top bits gives buckets that respect ranks_before.
// Buckets above the one where the cumulative mass crosses target are kept whole, buckets below are dropped,
// and only the crossing bucket is ranked (select_top_p). Two passes over the vocabulary.
void Sampler::apply_dense_top_p(std::span<const float> logits, double target) {
  float* w = dense_.data();  // (vocab_size) weights, 0 = excluded
  const auto n = static_cast<size_t>(vocab_size_);
  auto bucket_of = [](float weight) { return std::bit_cast<uint32_t>(weight) >> kTopPBucketShift; };
  bucket_mass_.assign(kTopPBuckets, 0.0);
  for (size_t i = 0; i < n; ++i) bucket_mass_[bucket_of(w[i])] += w[i];
  double before = 0.0;  // mass of the buckets above the crossing one
  uint32_t crossing = 0;
  for (uint32_t b = kTopPBuckets - 1; b > 0; --b) {  // bucket 0 holds only the excluded zeros (and subnormals)
    if (before + bucket_mass_[b] >= target) {
      crossing = b;
      break;
    }
    before += bucket_mass_[b];
  }
  if (crossing == 0) return;  // rounding never reached target: keep everything
  // Drop the buckets below (vectorized), then collect the crossing bucket (a rarely taken branch).
  for (size_t i = 0; i < n; ++i) w[i] = bucket_of(w[i]) < crossing ? 0.0f : w[i];
  cand_.clear();
  for (size_t i = 0; i < n; ++i) {
    if (bucket_of(w[i]) == crossing) cand_.push_back({static_cast<int32_t>(i), finite_top(logits[i]), w[i]});
  }
  const size_t n_keep = select_top_p(cand_, target - before, /*ranked=*/false);
  for (size_t i = n_keep; i < cand_.size(); ++i) w[cand_[i].id] = 0.0f;
}

}  // namespace ferry
