// GPU sampling (backends/cuda/sampling.cuh) against the CPU Sampler (sampling/sampler.cpp): for equal logits and
// parameters the same token, on random logits (with ties, NaN and -inf sprinkled in) over many seeds, positions
// and settings (greedy, temperature only, top-k, top-p, min-p, all together, k >= vocab). Sums run in another
// order on the GPU, so a different token is possible only when a cumulative sum lies within ~1e-16 of a
// boundary: the test allows no mismatch at all and reports the count.
// The CudaSamplingPorts tests check the bit-exact ports (exp_nonpositive, Philox) and the key order on the host,
// and replay the kernels' algorithms (the one-block path, the top-k path, the nucleus path) serially against the
// CPU sampler (they run without a GPU, in any build with the CUDA backend).
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/sampling/sampling.cuh"
#include "sampling/philox.h"
#include "sampling/sampler.h"
#include "sampling/token_mask.h"
#include "sampling/sampler_math.h"

namespace ferry::test {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The CPU sampler's settings for a GPU row's (the seed included; the position is the draw's argument).
SamplingParams cpu_params(const cuda_ops::SampleRowParams& rp) {
  SamplingParams sp;
  sp.temperature = rp.temperature;
  sp.top_k = rp.top_k;
  sp.top_p = rp.top_p;
  sp.min_p = rp.min_p;
  sp.seed = rp.seed;
  return sp;
}

TEST(CudaSamplingPorts, ExpMatchesTheCpuBitForBit) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-100.0f, 0.0f);
  std::vector<float> xs = {0.0f, -0.0f, -1e-30f, -87.0f, -86.99f, -87.01f, -1000.0f,
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < 200000; ++i) xs.push_back(d(rng));
  for (int i = 0; i < 2000; ++i) xs.push_back(-float(i) * 0.0437f);
  for (const float x : xs) ASSERT_EQ(bits(cuda_ops::sampler_exp(x)), bits(exp_nonpositive(x))) << x;
}

TEST(CudaSamplingPorts, PhiloxMatchesTheCpu) {
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xDEADBEEFCAFEull, ~0ull}) {
    for (uint64_t c = 0; c < 2000; c += 7) {
      ASSERT_EQ(cuda_ops::sampler_uniform(seed, c), philox_uniform(seed, c));
      ASSERT_EQ(cuda_ops::sampler_uniform(seed, c << 33), philox_uniform(seed, c << 33));
    }
  }
}

TEST(CudaSamplingPorts, KeysOrderLikeLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {-3.4e38f, -1.0f, -1e-38f, 0.0f, 1e-45f, 1.0f, 2.5f, 3.4e38f};
  for (size_t i = 0; i + 1 < v.size(); ++i) EXPECT_LT(cuda_ops::logit_key(v[i]), cuda_ops::logit_key(v[i + 1]));
  for (const float f : v) EXPECT_EQ(cuda_ops::key_logit(cuda_ops::logit_key(f)), f);
  EXPECT_EQ(cuda_ops::logit_key(-0.0f), cuda_ops::logit_key(0.0f));
  EXPECT_EQ(cuda_ops::logit_key(inf), cuda_ops::logit_key(std::numeric_limits<float>::max()));
  EXPECT_EQ(cuda_ops::logit_key(-inf), 0u);
  EXPECT_EQ(cuda_ops::logit_key(std::numeric_limits<float>::quiet_NaN()), 0u);
  EXPECT_GT(cuda_ops::logit_key(-3.4e38f), 0u);
}

// The kernel's algorithm (sampling.cu: argmax, radix-select top-k with the tie cut in id order, weights and
// total, min-p, radix-select top-p on mass with its tie cut, the draw), step for step but serially, so its
// equivalence with the CPU sampler is checked on many cases without a GPU.
int32_t algorithm_on_host(const float* lg, int64_t vocab, const cuda_ops::SampleRowParams& rp) {
  using cuda_ops::logit_key;
  const auto key = [&](int64_t i) { return logit_key(lg[i]); };
  uint32_t best_key = 0;
  int32_t arg = -1;
  double n_valid = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (key(i) > best_key) {
      best_key = key(i);
      arg = int32_t(i);
    }
    n_valid += key(i) != 0;
  }
  if (best_key == 0 || rp.temperature == 0.0f) return best_key == 0 ? -1 : arg;
  // Radix select as the kernel's radix_select: returns the key, *above = measure of larger keys; 0 = none.
  const auto radix = [&](double target, auto&& in, auto&& measure, double* above) -> uint32_t {
    uint32_t prefix = 0, mask = 0;
    double before = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      double hist[256] = {};
      for (int64_t i = 0; i < vocab; ++i)
        if (in(i) && key(i) != 0 && (key(i) & mask) == prefix) hist[(key(i) >> shift) & 255u] += measure(i);
      int digit = -1;
      for (int d = 255; d >= 0; --d) {
        if (before + hist[d] >= target) {
          digit = d;
          break;
        }
        before += hist[d];
      }
      if (digit < 0) return 0;
      prefix |= uint32_t(digit) << shift;
      mask |= 255u << shift;
    }
    *above = before;
    return prefix;
  };
  const auto first_reaching = [&](double target, bool strict, auto&& value) -> int32_t {
    double cum = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double prev = cum;
      cum += value(i);
      if ((strict ? cum > target : cum >= target) && !(strict ? prev > target : prev >= target)) return int32_t(i);
    }
    return -1;
  };
  const bool use_k = rp.top_k > 0 && rp.top_k < vocab && double(rp.top_k) < n_valid;
  uint32_t tk = 0;
  int32_t tk_cut = int32_t(vocab);
  if (use_k) {
    double above = 0;
    tk = radix(double(rp.top_k), [](int64_t) { return true; }, [](int64_t) { return 1.0; }, &above);
    tk_cut = first_reaching(double(rp.top_k) - above, false, [&](int64_t i) { return key(i) == tk ? 1.0 : 0.0; });
  }
  const auto in_k = [&](int64_t i) {
    const uint32_t k = key(i);
    return k != 0 && (!use_k || k > tk || (k == tk && i <= tk_cut));
  };
  const float max_logit = cuda_ops::key_logit(best_key);
  const float inv_t = cuda_ops::sample_inv_temperature(rp);
  const auto weight = [&](int64_t i) {
    return cuda_ops::sampler_exp(cuda_ops::mul_rn(cuda_ops::add_rn(cuda_ops::key_logit(key(i)), -max_logit), inv_t));
  };
  double total = 0;
  for (int64_t i = 0; i < vocab; ++i) total += in_k(i) ? double(weight(i)) : 0.0;
  const auto in_m = [&](int64_t i) { return in_k(i) && (rp.min_p <= 0.0f || weight(i) >= rp.min_p); };
  bool use_p = rp.top_p < 1.0f;
  uint32_t tp = 0;
  int32_t tp_cut = int32_t(vocab);
  if (use_p) {
    const double target = double(rp.top_p) * total;
    double above = 0;
    tp = radix(target, in_m, [&](int64_t i) { return double(weight(i)); }, &above);
    if (tp == 0) {
      use_p = false;
    } else {
      tp_cut = first_reaching(target - above, false,
                              [&](int64_t i) { return key(i) == tp && in_m(i) ? double(weight(i)) : 0.0; });
      if (tp_cut < 0) tp_cut = int32_t(vocab);
    }
  }
  const auto kept_w = [&](int64_t i) {
    if (!in_m(i)) return 0.0;
    if (use_p && !(key(i) > tp || (key(i) == tp && i <= tp_cut))) return 0.0;
    return double(weight(i));
  };
  double kept = 0;
  for (int64_t i = 0; i < vocab; ++i) kept += kept_w(i);
  const double target = double(cuda_ops::sampler_uniform(rp.seed, rp.position)) * kept;
  int32_t pick = first_reaching(target, true, kept_w);
  if (pick < 0)
    for (int64_t i = 0; i < vocab; ++i) pick = kept_w(i) > 0.0 ? int32_t(i) : pick;
  return pick;
}

// The top-k fast path (sampling.cu: gather_topk_kernel and draw_topk) step for step, serially: the coarse
// histogram's cut, the candidates in rank order, top-k / min-p / top-p as rank prefixes with serial double sums,
// the draw in id order. -2 where the kernel would not take the path (greedy, settings, too many candidates).
int32_t topk_algorithm_on_host(const float* lg, int64_t vocab, const cuda_ops::SampleRowParams& rp) {
  using cuda_ops::logit_key;
  const auto key = [&](int64_t i) { return logit_key(lg[i]); };
  uint32_t best_key = 0;
  double n_valid = 0;
  std::vector<uint32_t> hist(cuda_ops::kSampleBins, 0u);
  for (int64_t i = 0; i < vocab; ++i) {
    best_key = std::max(best_key, key(i));
    n_valid += key(i) != 0;
    if (key(i) != 0) ++hist[key(i) >> 20];
  }
  if (best_key == 0 || rp.temperature == 0.0f || !cuda_ops::sample_topk_fast(rp, vocab) ||
      !(double(rp.top_k) < n_valid))
    return -2;
  uint32_t bin = 0, count = 0, cum = 0;
  for (int b = cuda_ops::kSampleBins - 1; b >= 0; --b) {
    if (cum < uint32_t(rp.top_k) && cum + hist[size_t(b)] >= uint32_t(rp.top_k)) bin = uint32_t(b), count = cum + hist[size_t(b)];
    cum += hist[size_t(b)];
  }
  if (count < uint32_t(rp.top_k) || count > uint32_t(cuda_ops::kSampleCandMax)) return -2;
  std::vector<uint64_t> cand;  // (~key << 32 | id): ascending = rank order
  for (int64_t i = 0; i < vocab; ++i)
    if (key(i) != 0 && (key(i) >> 20) >= bin) cand.push_back(uint64_t(~key(i)) << 32 | uint64_t(i));
  EXPECT_EQ(cand.size(), size_t(count));
  std::sort(cand.begin(), cand.end());
  const float max_logit = cuda_ops::key_logit(best_key);
  const float inv_t = cuda_ops::sample_inv_temperature(rp);
  const auto weight = [&](uint32_t k) {
    return double(cuda_ops::sampler_exp(cuda_ops::mul_rn(cuda_ops::add_rn(cuda_ops::key_logit(k), -max_logit), inv_t)));
  };
  const int k = rp.top_k;
  double total = 0;
  for (int r = 0; r < k; ++r) total += weight(~uint32_t(cand[size_t(r)] >> 32));
  int kept = k;
  if (rp.min_p > 0.0f) {
    kept = 0;
    while (kept < k && weight(~uint32_t(cand[size_t(kept)] >> 32)) >= double(rp.min_p)) ++kept;
  }
  if (rp.top_p < 1.0f) {
    const double target = double(rp.top_p) * total;
    double c = 0;
    for (int r = 0; r < kept; ++r) {
      c += weight(~uint32_t(cand[size_t(r)] >> 32));
      if (c >= target) {
        kept = r + 1;
        break;
      }
    }
  }
  if (kept == 0) return -1;
  std::vector<uint64_t> byid;  // (id << 32 | key)
  for (int r = 0; r < kept; ++r) byid.push_back((cand[size_t(r)] & 0xFFFFFFFFu) << 32 | (~(cand[size_t(r)] >> 32) & 0xFFFFFFFFu));
  std::sort(byid.begin(), byid.end());
  double mass = 0;
  for (const uint64_t v : byid) mass += weight(uint32_t(v));
  const double target = double(cuda_ops::sampler_uniform(rp.seed, rp.position)) * mass;
  double c = 0;
  int32_t last = -1;
  for (const uint64_t v : byid) {
    const double w = weight(uint32_t(v));
    c += w;
    if (w > 0.0) last = int32_t(v >> 32);
    if (c > target) return int32_t(v >> 32);
  }
  return last;
}

// The nucleus path (sampling.cu: nucleus_hist_kernel, gather_kernel, draw_nucleus) step for step, serially, with
// the same decision functions (sampling.cuh): the histogram and its gather cut, the candidates in id order, the
// bucket walk and the crossing bucket's cut (estimates, or exactly when one lies within its tolerance, or always
// with exact_only), the draw. -2 where the kernel would not take the path. *ambiguous counts the estimates that
// were not decisive.
int32_t nucleus_algorithm_on_host(const float* lg, int64_t vocab, const cuda_ops::SampleRowParams& rp, bool exact_only,
                                  int* ambiguous) {
  using namespace cuda_ops;
  uint32_t best_key = 0;
  for (int64_t i = 0; i < vocab; ++i) best_key = std::max(best_key, logit_key(lg[i]));
  if (best_key == 0 || rp.temperature == 0.0f || !sample_nucleus(rp, vocab)) return -2;
  const float max_logit = key_logit(best_key), inv_t = cuda_ops::sample_inv_temperature(rp);
  const auto weight_of_key = [&](uint32_t k) { return key_weight(k, max_logit, inv_t); };
  std::vector<uint64_t> mass32(kSampleBuckets, 0);
  std::vector<uint32_t> count(kSampleBuckets, 0);
  double total = 0.0;  // the GPU sums per part, then the parts: another order (rounding)
  for (int64_t i = 0; i < vocab; ++i) {
    const float w = weight_of_key(logit_key(lg[i]));
    total += double(w);
    if (nucleus_survives(w, rp.min_p)) {
      ++count[weight_bucket(w)];
      mass32[weight_bucket(w)] += fixed32(w);
    }
  }
  const NucleusGatherCut ncut = nucleus_gather_cut(mass32.data(), count.data(), total, rp.top_p);
  if (ncut.count == 0 || ncut.count > uint32_t(kSampleNucleusMax)) return -2;
  std::vector<uint64_t> cv;  // (~key << 32 | id), id order
  for (int64_t i = 0; i < vocab; ++i) {
    const uint32_t k = logit_key(lg[i]);
    const float w = weight_of_key(k);
    if (nucleus_survives(w, rp.min_p) && weight_bucket(w) >= ncut.bucket) cv.push_back(uint64_t(~k) << 32 | uint64_t(i));
  }
  EXPECT_EQ(cv.size(), size_t(ncut.count));
  const auto weight = [&](uint64_t c) { return weight_of_key(~uint32_t(c >> 32)); };
  const int32_t n = int32_t(cv.size());
  std::vector<uint64_t> bm(kSampleBuckets, 0);
  for (const uint64_t c : cv) bm[weight_bucket(weight(c))] += fixed40(weight(c));
  const double target = double(rp.top_p) * total;
  for (bool exact = exact_only;; exact = true) {
    NucleusCross cross{NucleusStep::kKeepAll, 0u, 0.0};
    double tol = 0.0;
    if (rp.top_p < 1.0f) {
      if (!exact) {
        tol = nucleus_cross_tol(n, vocab, total);
        cross = nucleus_cross_estimate(bm.data(), ncut.bucket, target, tol);
      } else {
        std::vector<double> md(kSampleBuckets, 0.0);
        for (const uint64_t c : cv) md[weight_bucket(weight(c))] += double(weight(c));
        cross = nucleus_cross_exact(md.data(), ncut.bucket, target);
      }
    }
    if (cross.step == NucleusStep::kAmbiguous) {
      ++*ambiguous;
      continue;
    }
    if (cross.step == NucleusStep::kMissed) return -2;
    if (cross.step == NucleusStep::kKeepAll) break;
    std::vector<uint64_t> rk;  // (~key << 32 | index in cv): ascending = rank order
    for (int32_t i = 0; i < n; ++i)
      if (weight_bucket(weight(cv[size_t(i)])) == cross.bucket) rk.push_back((cv[size_t(i)] & 0xFFFFFFFF00000000ull) | uint64_t(i));
    if (rk.size() > size_t(kSampleCrossMax)) return -2;
    std::sort(rk.begin(), rk.end());
    const NucleusKeep keep =
        nucleus_keep([&](int32_t r) { return weight(rk[size_t(r)]); }, int32_t(rk.size()), target - cross.before, tol);
    if (keep.ambiguous) {
      ++*ambiguous;
      continue;
    }
    for (size_t r = size_t(keep.keep); r < rk.size(); ++r) {
      uint64_t& c = cv[size_t(uint32_t(rk[r]))];
      c = 0xFFFFFFFF00000000ull | (c & 0xFFFFFFFFull);
    }
    for (uint64_t& c : cv)
      if (weight_bucket(weight(c)) < cross.bucket) c = 0xFFFFFFFF00000000ull | (c & 0xFFFFFFFFull);
    break;
  }
  const float u = sampler_uniform(rp.seed, rp.position);
  if (!exact_only) {  // the kernel's estimate: fixed40 prefix sums, the one id that clears the tolerance
    uint64_t kept = 0;
    for (const uint64_t c : cv) kept += fixed40(weight(c));
    const double kept_d = double(kept) * 0x1p-40, tgt = double(u) * kept_d, tol = nucleus_draw_tol(n, kept_d);
    uint64_t e = 0;
    for (const uint64_t c : cv) {
      const double lo = double(e) * 0x1p-40;
      e += fixed40(weight(c));
      if (lo <= tgt - tol && double(e) * 0x1p-40 > tgt + tol) return int32_t(uint32_t(c));
    }
    ++*ambiguous;
  }
  return nucleus_draw_exact([&](int32_t i) { return int64_t(uint32_t(cv[size_t(i)])); },
                            [&](int32_t i) { return weight(cv[size_t(i)]); }, n, vocab, u);
}

// The nucleus path's replay against the CPU sampler: peaked, ordinary and flat rows (the flat ones' nucleus passes
// the candidate cap: the path declines them), ties, NaN and +-inf, top-p alone, min-p alone, both; every draw with
// the estimates and again exactly.
TEST(CudaSamplingPorts, NucleusAlgorithmMatchesTheCpuSampler) {
  const cuda_ops::SampleRowParams settings[] = {
      {1.0f, 0, 0.9f, 0.0f, 0, 0},  {0.7f, 0, 0.5f, 0.05f, 0, 0}, {1.0f, 0, 1.0f, 0.05f, 0, 0},
      {0.8f, 0, 0.95f, 0.05f, 0, 0}, {1.5f, 0, 0.99f, 0.0f, 0, 0}, {1e-3f, 0, 0.3f, 0.0f, 0, 0},
      {2.0f, 100000, 0.6f, 0.0f, 0, 0},  // top_k >= vocab: off, as on the CPU
      {1.0f, 0, 0.2f, 0.3f, 0, 0}};
  int total = 0, fast = 0, declined = 0, ambiguous = 0;
  for (const int64_t vocab : {17, 1000, 20000, 50001}) {
    std::mt19937 rng(static_cast<uint32_t>(vocab) + 7);
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (int rep = 0; rep < 8; ++rep) {
      const float spread[] = {0.02f, 1.0f, 3.0f, 3.0f, 8.0f, 1.0f, 0.5f, 5.0f};
      std::normal_distribution<float> d(0.0f, spread[rep]);
      for (float& l : logits) {
        l = d(rng);
        if (rep == 3) l = std::round(l * 4.0f) / 4.0f;  // ties
        if (rep == 5 && rng() % 500 == 0) l += 12.0f;     // peaked: a few ids far above the rest
        if (rng() % 97 == 0) l = std::numeric_limits<float>::quiet_NaN();
        if (rng() % 89 == 0) l = -std::numeric_limits<float>::infinity();
        if (rep == 7 && rng() % 4001 == 0) l = std::numeric_limits<float>::infinity();
      }
      for (cuda_ops::SampleRowParams rp : settings) {
        rp.seed = rng();
        rp.position = rng() % 500;
        Sampler cpu(cpu_params(rp), int32_t(vocab));
        const int32_t want = cpu.sample_at({logits.data(), size_t(vocab)}, rp.position);
        for (const bool exact : {false, true}) {
          const int32_t got = nucleus_algorithm_on_host(logits.data(), vocab, rp, exact, &ambiguous);
          if (got == -2) {
            declined += exact ? 0 : 1;
            continue;
          }
          ASSERT_EQ(got, want) << "nucleus path" << (exact ? " (exact)" : "") << ": vocab " << vocab << " rep "
                               << rep << " T " << rp.temperature << " p " << rp.top_p << " min_p " << rp.min_p;
          fast += exact ? 0 : 1;
        }
        ++total;
      }
    }
  }
  std::printf("nucleus path on the host: %d draws, %d by the path (estimates and exactly), %d declined, %d estimates "
              "not decisive; all equal to the CPU sampler's\n", total, fast, declined, ambiguous);
  EXPECT_GT(fast, total / 2);
  EXPECT_GT(declined, 0);  // the flat rows' nucleus passes the cap
}

TEST(CudaSamplingPorts, KernelAlgorithmMatchesTheCpuSampler) {
  const cuda_ops::SampleRowParams settings[] = {
      {0.0f, 40, 0.95f, 0.05f, 0, 0}, {1.0f, 0, 1.0f, 0.0f, 0, 0},   {0.8f, 40, 0.95f, 0.05f, 0, 0},
      {0.7f, 0, 0.9f, 0.0f, 0, 0},    {1.3f, 0, 1.0f, 0.1f, 0, 0},   {0.5f, 5, 1.0f, 0.0f, 0, 0},
      {1.0f, 100000, 0.5f, 0.0f, 0, 0}, {2.0f, 1000, 0.99f, 0.01f, 0, 0}, {1e-3f, 0, 0.3f, 0.0f, 0, 0},
      {1.0f, 1, 1.0f, 0.0f, 0, 0}, {1.0f, 1024, 1.0f, 0.0f, 0, 0}, {0.9f, 64, 0.8f, 0.02f, 0, 0}};
  int total = 0, fast = 0;
  for (const int64_t vocab : {17, 1000, 20000}) {
    std::mt19937 rng(static_cast<uint32_t>(vocab));
    std::normal_distribution<float> d(0.0f, 3.0f);
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (int rep = 0; rep < 12; ++rep) {
      for (float& l : logits) {
        l = std::round(d(rng) * 4.0f) / 4.0f;  // ties
        if (rng() % 97 == 0) l = std::numeric_limits<float>::quiet_NaN();
        if (rng() % 89 == 0) l = -std::numeric_limits<float>::infinity();
        if (rng() % 4001 == 0) l = std::numeric_limits<float>::infinity();
      }
      for (cuda_ops::SampleRowParams rp : settings) {
        rp.seed = rng();
        rp.position = rng() % 500;
        Sampler cpu(cpu_params(rp), int32_t(vocab));
        const std::vector<int32_t> history(static_cast<size_t>(rp.position), 0);
        const int32_t want = cpu.sample({logits.data(), size_t(vocab)}, history);
        ASSERT_EQ(algorithm_on_host(logits.data(), vocab, rp), want)
            << "vocab " << vocab << " rep " << rep << " T " << rp.temperature << " k " << rp.top_k << " p "
            << rp.top_p << " min_p " << rp.min_p;
        const int32_t via_topk = topk_algorithm_on_host(logits.data(), vocab, rp);
        if (via_topk != -2) {
          ASSERT_EQ(via_topk, want) << "top-k path: vocab " << vocab << " rep " << rep << " T " << rp.temperature
                                    << " k " << rp.top_k << " p " << rp.top_p << " min_p " << rp.min_p;
          ++fast;
        }
        ++total;
      }
    }
  }
  std::printf("kernel algorithm on the host: %d draws (%d also by the top-k path), all equal to the CPU sampler's\n",
              total, fast);
  EXPECT_GT(fast, total / 4);  // the top-k path was exercised
}

TEST(CudaSampling, SameTokenAsTheCpuSampler) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) GTEST_SKIP() << "no CUDA device";
  struct Setting {
    float t;
    int32_t k;
    float p, min_p;
  };
  const Setting settings[] = {{0.0f, 40, 0.95f, 0.05f}, {1.0f, 0, 1.0f, 0.0f},   {0.8f, 40, 0.95f, 0.05f},
                              {0.7f, 0, 0.9f, 0.0f},    {1.3f, 0, 1.0f, 0.1f},   {0.5f, 5, 1.0f, 0.0f},
                              {1.0f, 100000, 0.5f, 0.0f}, {2.0f, 1000, 0.99f, 0.01f}, {1e-3f, 0, 0.3f, 0.0f},
                              // the top-k fast path's edges: its largest k, k = 1, top-p and min-p together
                              {1.0f, 1024, 1.0f, 0.0f}, {1.0f, 1, 1.0f, 0.0f}, {0.9f, 64, 0.8f, 0.02f},
                              // the nucleus path: top-p alone, min-p alone, both, a wide nucleus (declined on
                              // flat rows: past the candidate cap)
                              {1.0f, 0, 0.9f, 0.0f}, {1.0f, 0, 1.0f, 0.05f}, {0.8f, 0, 0.95f, 0.05f},
                              {1.5f, 0, 0.99f, 0.0f}};
  int mismatches = 0, total = 0;
  // 50001: pass 1's last slice is not whole float4s (the scalar walk); rows spread from flat (sigma 0.05: the
  // nucleus passes the cap) to peaked (a few ids far above). Every row is drawn four ways: pass 1 in one block;
  // split (SampleParams::parts); split + the fast paths' scratch (SampleParams::cand: its scratch is reused by every
  // later call, so a call that left it dirty spoils the next ones); the same with every nucleus decision exact.
  // m = 200 splits each row into 3 parts (24 rows: 22).
  const struct {
    int64_t vocab, m;
  } shapes[] = {{1000, 24}, {50000, 24}, {50001, 24}, {50000, 200}};
  for (const auto [vocab, m] : shapes) {
    std::vector<float> logits(static_cast<size_t>(m * vocab));
    std::mt19937 rng(static_cast<uint32_t>(vocab + m));
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (size_t i = 0; i < logits.size(); ++i) {
      const int64_t r = int64_t(i) / vocab;
      const float sigma[] = {3.0f, 0.05f, 1.0f, 8.0f};
      logits[i] = d(rng) * sigma[r % 4];
      if (r % 4 == 0) logits[i] = std::round(logits[i] * 4.0f) / 4.0f;  // quarter steps: many equal logits (ties)
      if (r % 4 == 2 && rng() % 400 == 0) logits[i] += 12.0f;           // peaked
      if (rng() % 997 == 0) logits[i] = std::numeric_limits<float>::quiet_NaN();
      if (rng() % 991 == 0) logits[i] = -std::numeric_limits<float>::infinity();
    }
    float* dl = nullptr;
    cuda_ops::SampleRowParams* dp = nullptr;
    int32_t* dout = nullptr;
    ASSERT_EQ(cudaMalloc(&dl, logits.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dp, size_t(m) * sizeof(cuda_ops::SampleRowParams)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dout, size_t(m) * 4), cudaSuccess);
    void* dparts = nullptr;
    void* dcand = nullptr;
    ASSERT_EQ(cudaMalloc(&dparts, cuda_ops::sample_rows_parts_bytes(m)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dcand, cuda_ops::sample_rows_cand_bytes(m, vocab)), cudaSuccess);
    ASSERT_EQ(cudaMemset(dcand, 0, cuda_ops::sample_rows_cand_bytes(m, vocab)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dl, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    // One block; pass 1 split; split + the fast paths the rows need (the backend's choice: sample_rows_need); split
    // + every fast path's launch, exact decisions.
    for (const int mode : {0, 1, 2, 3})
    for (const Setting st : settings) {
      std::vector<cuda_ops::SampleRowParams> rows(static_cast<size_t>(m));
      for (int64_t r = 0; r < m; ++r)
        rows[size_t(r)] = {st.t, st.k, st.p, st.min_p, uint64_t(r * 7919 + 3), uint64_t(r * 13)};
      ASSERT_EQ(cudaMemcpy(dp, rows.data(), rows.size() * sizeof(rows[0]), cudaMemcpyHostToDevice), cudaSuccess);
      const cuda_ops::SampleRowsNeed need = cuda_ops::sample_rows_need(rows.data(), m, vocab);
      cuda_ops::sample_rows({.logits = dl, .m = m, .vocab = vocab, .rows = dp, .out = dout,
                             .parts = mode >= 1 ? dparts : nullptr,
                             .cand = mode == 3 || (mode == 2 && need.cand) ? dcand : nullptr,
                             .exact_only = mode == 3, .nucleus = mode == 2 ? need.nucleus : true},
                            nullptr);
      std::vector<int32_t> got(static_cast<size_t>(m));
      ASSERT_EQ(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int64_t r = 0; r < m; ++r) {
        Sampler cpu(cpu_params(rows[size_t(r)]), int32_t(vocab));
        const std::vector<int32_t> history(size_t(rows[size_t(r)].position), 0);
        const int32_t want = cpu.sample({logits.data() + r * vocab, size_t(vocab)}, history);
        ++total;
        if (got[size_t(r)] != want) {
          ++mismatches;
          ADD_FAILURE() << "vocab " << vocab << " mode " << mode << " row " << r << " T " << st.t << " k " << st.k << " p " << st.p
                        << " min_p " << st.min_p << ": GPU " << got[size_t(r)] << ", CPU " << want;
        }
      }
    }
    cudaFree(dl);
    cudaFree(dp);
    cudaFree(dout);
    cudaFree(dparts);
    cudaFree(dcand);
  }
  std::printf("GPU sampling: %d of %d draws differ from the CPU sampler\n", mismatches, total);
}
// The same through CudaBackend::sample (host params, device logits and ids).
TEST(CudaSampling, BackendMethod) {
  if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CudaBackend gpu;
  const int64_t m = 5, vocab = 32000;
  std::vector<float> logits(static_cast<size_t>(m * vocab));
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (float& v : logits) v = d(rng);
  DeviceBuffer lb = gpu.alloc(logits.size() * 4), ob = gpu.alloc(size_t(m) * 4);
  const Tensor gl = Tensor::make(DType::F32, {m, vocab}, lb.data(), Device::Cuda);
  const Tensor go = Tensor::make(DType::I32, {m}, ob.data(), Device::Cuda);
  gpu.copy_to_device(gl, logits.data(), logits.size() * 4);
  std::vector<SamplingParams> params(static_cast<size_t>(m));
  std::vector<uint64_t> positions(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) {
    params[size_t(r)].seed = uint64_t(r) + 11;
    params[size_t(r)].temperature = r == 0 ? 0.0f : 0.9f;
    if (r == 2) params[size_t(r)].top_k = 40;    // the top-k path
    if (r == 3) params[size_t(r)].top_p = 0.9f;  // the nucleus path
    if (r == 4) params[size_t(r)].min_p = 0.05f;
    positions[size_t(r)] = uint64_t(r) * 3;
  }
  gpu.sample(go, gl, params, positions, {});
  std::vector<int32_t> got(static_cast<size_t>(m));
  gpu.copy_to_host(got.data(), go, got.size() * 4);
  for (int64_t r = 0; r < m; ++r) {
    Sampler cpu(params[size_t(r)], int32_t(vocab));
    const std::vector<int32_t> history(size_t(positions[size_t(r)]), 0);
    EXPECT_EQ(got[size_t(r)], cpu.sample({logits.data() + r * vocab, size_t(vocab)}, history)) << "row " << r;
  }
}
// Structured output's masks (CudaBackend::sample with a mask): the masked logits become -inf on the device and
// the draw equals the CPU sampler's over the same masked row, for every sampling path; rows whose mask allows a
// handful of tokens (a grammar's usual case), about half of them, or all of them (an unmasked row beside them).
TEST(CudaSampling, MaskedRowsDrawOnlyAllowedTokens) {
  if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CudaBackend gpu;
  const int64_t m = 12, vocab = 128256, words = (vocab + 63) / 64;
  std::mt19937_64 rng(31);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(m * vocab));
  for (float& v : logits) v = d(rng);
  std::vector<uint64_t> mask(static_cast<size_t>(m * words), 0);
  for (int64_t r = 0; r < m; ++r) {
    uint64_t* row = mask.data() + r * words;
    if (r % 3 == 0) {  // a few allowed tokens, one of them in the last, partial word
      for (int k = 0; k < 5; ++k) {
        const auto t = uint64_t(rng() % uint64_t(vocab));
        row[t / 64] |= uint64_t(1) << (t % 64);
      }
      row[(vocab - 1) / 64] |= uint64_t(1) << ((vocab - 1) % 64);
    } else if (r % 3 == 1) {
      for (int64_t w = 0; w < words; ++w) row[w] = rng();
    } else {
      std::fill(row, row + words, ~uint64_t(0));
    }
  }
  DeviceBuffer lb = gpu.alloc(logits.size() * 4), ob = gpu.alloc(size_t(m) * 4);
  const Tensor gl = Tensor::make(DType::F32, {m, vocab}, lb.data(), Device::Cuda);  // (m, vocab) f32
  const Tensor go = Tensor::make(DType::I32, {m}, ob.data(), Device::Cuda);          // (m) i32
  gpu.copy_to_device(gl, logits.data(), logits.size() * 4);
  std::vector<SamplingParams> params(static_cast<size_t>(m));
  std::vector<uint64_t> positions(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) {
    SamplingParams& p = params[size_t(r)];
    p.seed = uint64_t(r) + 5;
    p.temperature = r % 4 == 0 ? 0.0f : 1.0f;
    p.top_k = r % 4 == 1 ? 40 : 0;
    p.top_p = r % 4 == 2 ? 0.9f : 1.0f;
    p.min_p = r % 4 == 3 ? 0.05f : 0.0f;
    positions[size_t(r)] = uint64_t(r) * 7 + 1;
  }
  gpu.sample(go, gl, params, positions, mask);
  std::vector<int32_t> got(static_cast<size_t>(m));
  gpu.copy_to_host(got.data(), go, got.size() * 4);
  std::vector<float> masked_back(logits.size());
  gpu.copy_to_host(masked_back.data(), gl, masked_back.size() * 4);
  for (int64_t r = 0; r < m; ++r) {
    std::vector<float> row(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
    ASSERT_TRUE(apply_token_mask(row, std::span(mask).subspan(size_t(r * words), size_t(words))));
    ASSERT_EQ(0, std::memcmp(row.data(), masked_back.data() + r * vocab, row.size() * 4)) << "row " << r;
    const int32_t t = got[size_t(r)];
    ASSERT_TRUE(t >= 0 && t < vocab) << "row " << r;
    EXPECT_TRUE((mask[size_t(r * words + t / 64)] >> (t % 64)) & 1) << "row " << r << " drew " << t;
    Sampler cpu(params[size_t(r)], int32_t(vocab));
    const std::vector<int32_t> history(size_t(positions[size_t(r)]), 0);
    EXPECT_EQ(t, cpu.sample(row, history)) << "row " << r;
  }
}
}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
