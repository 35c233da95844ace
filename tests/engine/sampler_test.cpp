#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "engine/logprobs.h"
#include "sampling/philox.h"

namespace ferry {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> random_logits(int32_t vocab_size, uint32_t seed, float scale = 3.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(vocab_size));
  for (float& x : v) x = dist(rng);
  return v;
}

SamplingParams plain(float temperature) {  // only temperature; every filter and penalty off
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

// Reference: the documented pipeline written the slow, obvious way (full sort, doubles).
// Returns the probability of every token in the vocabulary.
std::vector<double> reference_distribution(std::vector<float> logits, const SamplingParams& p,
                                           const std::vector<int32_t>& history) {
  const size_t n = logits.size();
  for (float& l : logits) {
    if (std::isnan(l)) l = -kInf;
  }
  size_t first = 0;
  if (p.penalty_last_n >= 0) first = history.size() - std::min(history.size(), size_t(p.penalty_last_n));
  std::map<int32_t, int> count;
  for (size_t i = first; i < history.size(); ++i) ++count[history[i]];
  for (const auto& [t, c] : count) {
    float& l = logits[t];
    l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= p.presence_penalty + p.frequency_penalty * float(c);
  }
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> prob(n, 0.0);
  if (p.temperature == 0.0f) {
    prob[order[0]] = 1.0;
    return prob;
  }
  size_t keep = 0;
  while (keep < n && logits[order[keep]] != -kInf) ++keep;
  if (p.top_k > 0) keep = std::min(keep, size_t(p.top_k));
  double z = 0;
  const double top = logits[order[0]];
  for (size_t i = 0; i < keep; ++i) z += std::exp((logits[order[i]] - top) / p.temperature);
  std::vector<double> q(keep);
  for (size_t i = 0; i < keep; ++i) q[i] = std::exp((logits[order[i]] - top) / p.temperature) / z;
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < keep; ++i) {
      cum += q[i];
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < keep; ++i) {
    if (q[i] >= p.min_p * q[0]) kept = i + 1;
  }
  double s = 0;
  for (size_t i = 0; i < kept; ++i) s += q[i];
  for (size_t i = 0; i < kept; ++i) prob[order[i]] = q[i] / s;
  return prob;
}

// ---- random numbers ---------------------------------------------------------------------------------

TEST(Philox, KnownAnswersFromRandom123) {
  // Random123 tests/kat_vectors, "philox4x32 10" lines: counter[4] key[2] -> output[4].
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, UniformIsInRangeAndUniform) {
  constexpr int kN = 200000;
  double sum = 0, sum_sq = 0;
  std::vector<int> bins(10, 0);
  for (int i = 0; i < kN; ++i) {
    const float u = philox_uniform(42, uint64_t(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    sum_sq += double(u) * u;
    ++bins[size_t(u * 10)];
  }
  EXPECT_NEAR(sum / kN, 0.5, 0.005);
  EXPECT_NEAR(sum_sq / kN - (sum / kN) * (sum / kN), 1.0 / 12, 0.002);
  for (int b : bins) EXPECT_NEAR(double(b) / kN, 0.1, 0.005);
  EXPECT_NE(philox_uniform(1, 7), philox_uniform(2, 7));  // the seed matters
}

// ---- greedy and determinism ---------------------------------------------------------------------------

TEST(Sampler, GreedyIsArgmax) {
  constexpr int32_t kVocab = 1000;
  Sampler s(plain(0.0f), kVocab);
  for (uint32_t trial = 0; trial < 50; ++trial) {
    const std::vector<float> logits = random_logits(kVocab, trial);
    const auto expected = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(s.sample(logits, {}), expected) << "trial " << trial;
    ASSERT_EQ(s.kept().size(), 1u);
    EXPECT_EQ(s.kept()[0].id, expected);
  }
  std::vector<float> tied(10, -1.0f);
  tied[7] = tied[3] = tied[9] = 2.5f;
  EXPECT_EQ(Sampler(plain(0.0f), 10).sample(tied, {}), 3);  // ties -> lowest id
}

TEST(Sampler, TopK1IsGreedy) {
  constexpr int32_t kVocab = 5000;
  SamplingParams p;  // defaults, but top_k = 1
  p.top_k = 1;
  p.temperature = 1.5f;
  Sampler s(p, kVocab);
  Sampler greedy(plain(0.0f), kVocab);
  std::vector<int32_t> history;
  for (uint32_t trial = 0; trial < 50; ++trial) {
    const std::vector<float> logits = random_logits(kVocab, 100 + trial);
    EXPECT_EQ(s.sample(logits, history), greedy.sample(logits, history)) << "trial " << trial;
    history.push_back(int32_t(trial));
  }
}

// Autoregressive run: logits at each step depend on the tokens so far.
std::vector<int32_t> generate(const SamplingParams& p, int32_t vocab_size, int n_steps) {
  Sampler s(p, vocab_size);
  std::vector<int32_t> history = {1, 2, 3};
  for (int i = 0; i < n_steps; ++i) {
    const std::vector<float> logits = random_logits(vocab_size, uint32_t(history.back() * 7919 + i), 1.5f);
    history.push_back(s.sample(logits, history));
  }
  return history;
}

// sample_at (what a backend's sample() runs per row, penalties off) draws what sample() draws from a history of
// that length, also on a Sampler reused across settings with set_params (CpuBackend keeps one per row).
TEST(Sampler, SampleAtEqualsSampleWithAHistoryOfThatLength) {
  constexpr int32_t kVocab = 5003;
  std::vector<SamplingParams> settings(5);
  settings[0].temperature = 0.0f;
  settings[1].temperature = 0.9f;  // the defaults: top-k + top-p + min-p
  settings[2].temperature = 1.1f, settings[2].top_k = 0, settings[2].top_p = 1.0f, settings[2].min_p = 0.0f;
  settings[3].temperature = 0.7f, settings[3].top_k = 0, settings[3].top_p = 0.8f;
  settings[4].temperature = 1.3f, settings[4].top_k = 3, settings[4].min_p = 0.0f;
  Sampler reused(settings[4], kVocab);
  for (int round = 0; round < 40; ++round) {
    const std::vector<float> logits = random_logits(kVocab, uint32_t(900 + round));
    SamplingParams p = settings[size_t(round) % settings.size()];
    p.seed = uint64_t(round * 7 + 1);
    const uint64_t position = uint64_t(round * 13 % 97);
    const std::vector<int32_t> history(position, 1);
    Sampler fresh(p, kVocab);
    const int32_t want = fresh.sample(logits, history);
    reused.set_params(p);
    EXPECT_EQ(reused.sample_at(logits, position), want) << "round " << round;
  }
  SamplingParams pen;
  pen.repetition_penalty = 1.2f;
  reused.set_params(pen);
  EXPECT_THROW(reused.sample_at(random_logits(kVocab, 1), 3), Error);  // penalties need the history
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams p;  // defaults: T 0.8, top-k 40, top-p 0.95, min-p 0.05
  p.seed = 1234;
  p.repetition_penalty = 1.1f;
  const std::vector<int32_t> a = generate(p, 3000, 200);
  const std::vector<int32_t> b = generate(p, 3000, 200);
  EXPECT_EQ(a, b);
  p.seed = 1235;
  const std::vector<int32_t> c = generate(p, 3000, 200);
  EXPECT_NE(a, c);
  // Every generated token is distinct-ish: the draws are not stuck on the argmax.
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 100u);
}

TEST(Sampler, DrawDependsOnlyOnInputsNotOnEarlierCalls) {
  SamplingParams p = plain(1.0f);
  p.seed = 99;
  Sampler s(p, 64);
  const std::vector<float> logits = random_logits(64, 5, 0.5f);
  const std::vector<int32_t> history = {4, 5, 6};
  const int32_t first = s.sample(logits, history);
  for (int i = 0; i < 20; ++i) s.sample(random_logits(64, 1000 + i), {});
  EXPECT_EQ(s.sample(logits, history), first);
  Sampler fresh(p, 64);
  EXPECT_EQ(fresh.sample(logits, history), first);
}

// ---- distributions ------------------------------------------------------------------------------------

struct DistCase {
  std::string name;
  SamplingParams params;
};

// 20k draws (positions 0..19999) from a small known softmax; each token's frequency within 0.015 of the
// reference probability (4 standard deviations at p = 0.5), excluded tokens never drawn, and kept() equal
// to the reference distribution.
TEST(Sampler, EmpiricalDistributionMatchesReference) {
  const std::vector<float> logits = {1.0f, 2.5f, -0.5f, 2.0f, 0.3f, 1.7f, -2.0f, 0.9f};
  std::vector<DistCase> cases;
  cases.push_back({"temperature 1", plain(1.0f)});
  cases.push_back({"temperature 0.5", plain(0.5f)});
  cases.push_back({"temperature 2", plain(2.0f)});
  {
    SamplingParams p = plain(1.0f);
    p.top_k = 3;
    cases.push_back({"top_k 3", p});
  }
  {
    SamplingParams p = plain(1.0f);
    p.top_p = 0.7f;
    cases.push_back({"top_p 0.7", p});
  }
  {
    SamplingParams p = plain(1.0f);
    p.min_p = 0.2f;
    cases.push_back({"min_p 0.2", p});
  }
  {
    SamplingParams p = plain(1.3f);
    p.top_k = 6;
    p.top_p = 0.9f;
    p.min_p = 0.08f;
    cases.push_back({"T 1.3 top_k 6 top_p 0.9 min_p 0.08", p});
  }
  constexpr int kDraws = 20000;
  constexpr double kTol = 0.015;
  std::vector<int32_t> positions(kDraws, 0);  // history contents do not matter: penalties are off
  for (DistCase& c : cases) {
    SCOPED_TRACE(c.name);
    c.params.seed = 77;
    const std::vector<double> want = reference_distribution(logits, c.params, {});
    Sampler s(c.params, int32_t(logits.size()));
    std::vector<int> hits(logits.size(), 0);
    for (int i = 0; i < kDraws; ++i) {
      ++hits[size_t(s.sample(logits, std::span(positions).first(size_t(i))))];
    }
    int n_excluded = 0;
    for (size_t t = 0; t < logits.size(); ++t) {
      if (want[t] == 0.0) {
        ++n_excluded;
        EXPECT_EQ(hits[t], 0) << "token " << t << " is excluded but was drawn";
      } else {
        EXPECT_NEAR(double(hits[t]) / kDraws, want[t], kTol) << "token " << t;
      }
    }
    if (c.name != "temperature 1" && c.name.rfind("temperature", 0) != 0) {
      EXPECT_GT(n_excluded, 0) << "the case should exclude something";
    }
    std::vector<double> got(logits.size(), 0.0);
    for (const TokenProb& tp : s.kept()) got[size_t(tp.id)] = tp.prob;
    for (size_t t = 0; t < logits.size(); ++t) EXPECT_NEAR(got[t], want[t], 1e-6) << "kept() token " << t;
  }
}

// Big random vocabularies: the kept set and its probabilities equal the reference's for every filter path
// (top-k heap; top-p by buckets plus a weighted quickselect; min-p threshold), on flat, tied and peaky logits.
enum class Shape { kNormal, kTied, kPeaky };

std::vector<float> shaped_logits(int32_t vocab_size, uint32_t seed, Shape shape) {
  std::vector<float> v = random_logits(vocab_size, seed, shape == Shape::kPeaky ? 1.0f : 2.0f);
  std::mt19937 rng(seed);
  if (shape == Shape::kTied) {
    for (float& x : v) x = std::round(x * 2.0f) * 0.5f;  // ~20 distinct values: ties everywhere
  } else if (shape == Shape::kPeaky) {
    for (int i = 0; i < 10; ++i) v[rng() % v.size()] = 9.0f + float(i) * 0.4f;  // like a real LM's head
  }
  return v;
}

TEST(Sampler, KeptSetMatchesReferenceOnLargeVocab) {
  constexpr int32_t kVocab = 50000;
  struct Case {
    int32_t top_k;
    float top_p, min_p, temperature;
  };
  const std::vector<Case> cases = {
      {40, 0.95f, 0.05f, 0.8f}, {40, 1.0f, 0.0f, 1.0f},  {0, 0.95f, 0.0f, 1.0f},  {0, 0.5f, 0.0f, 2.0f},
      {0, 1.0f, 0.1f, 1.0f},    {0, 0.9f, 0.01f, 1.5f}, {500, 0.99f, 0.0f, 3.0f}, {0, 0.999f, 0.0f, 4.0f},
      {0, 0.3f, 0.0f, 0.7f},    {0, 1.0f, 0.0f, 1.0f},
  };
  int exercised_large_nucleus = 0;
  for (const Shape shape : {Shape::kNormal, Shape::kTied, Shape::kPeaky}) {
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      SCOPED_TRACE(testing::Message() << "shape " << int(shape) << " case " << ci);
      SamplingParams p = plain(c.temperature);
      p.top_k = c.top_k;
      p.top_p = c.top_p;
      p.min_p = c.min_p;
      const std::vector<float> logits = shaped_logits(kVocab, uint32_t(500 + ci), shape);
      const std::vector<double> want = reference_distribution(logits, p, {});
      Sampler s(p, kVocab);
      const int32_t token = s.sample(logits, {});
      EXPECT_GT(want[size_t(token)], 0.0);
      size_t n_want = 0;
      for (double w : want) n_want += w > 0;
      const std::vector<TokenProb> kept = s.kept();
      ASSERT_EQ(kept.size(), n_want);
      for (const TokenProb& tp : kept) {
        ASSERT_GT(want[size_t(tp.id)], 0.0) << "token " << tp.id << " kept but excluded by the reference";
        EXPECT_NEAR(tp.prob, want[size_t(tp.id)], 1e-5 * want[size_t(tp.id)] + 1e-9);
      }
      exercised_large_nucleus += c.top_k == 0 && c.top_p < 1.0f && n_want > 1000;
    }
  }
  EXPECT_GT(exercised_large_nucleus, 3) << "top-p without top-k never had to select among many tokens";
}

// ---- penalties ----------------------------------------------------------------------------------------

TEST(Sampler, PenaltiesFollowTheFormulas) {
  SamplingParams p = plain(0.0f);
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.penalty_last_n = 5;
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 0.0f, 3.0f};
  const std::vector<int32_t> history = {4, 0, 0, 1, 0, 3};  // window (last 5): 0 x3, 1 x1, 3 x1
  {
    Sampler s(p, 5);
    std::vector<float> l = logits;
    s.apply_penalties(l, history);
    // token 0: 2.0 / 2 = 1.0, then - 0.5 - 0.25 * 3 = -0.25
    // token 1: -1.0 * 2 = -2.0, then - 0.5 - 0.25 * 1 = -2.75
    // token 2: not in the window: 0.5
    // token 3: 0.0 * 2 = 0.0, then - 0.5 - 0.25 = -0.75
    // token 4: only before the window: 3.0
    EXPECT_EQ(l, (std::vector<float>{-0.25f, -2.75f, 0.5f, -0.75f, 3.0f}));
  }
  {
    p.penalty_last_n = -1;  // whole history: token 4 counts once: 3.0 / 2 - 0.5 - 0.25 = 0.75
    Sampler s(p, 5);
    std::vector<float> l = logits;
    s.apply_penalties(l, history);
    EXPECT_EQ(l, (std::vector<float>{-0.25f, -2.75f, 0.5f, -0.75f, 0.75f}));
    EXPECT_EQ(s.sample(logits, history), 4);  // 0.75 is still the best
    std::vector<float> l2 = l;
    s.apply_penalties(l2, history);           // scratch counts were reset: the same change again
    EXPECT_FLOAT_EQ(l2[0], (-0.25f * 2.0f) - 1.25f);
  }
  {
    SamplingParams q = p;  // negative presence/frequency penalties encourage repeats
    q.repetition_penalty = 1.0f;
    q.presence_penalty = -1.0f;
    q.frequency_penalty = -0.5f;
    q.penalty_last_n = 3;  // window {1, 0, 3}
    Sampler s(q, 5);
    std::vector<float> l = logits;
    s.apply_penalties(l, history);
    EXPECT_EQ(l, (std::vector<float>{3.5f, 0.5f, 0.5f, 1.5f, 3.0f}));
    EXPECT_EQ(s.sample(logits, history), 0);  // the penalty changed the greedy choice from 4 to 0
  }
  {
    p.penalty_last_n = 0;  // no window: nothing changes
    Sampler s(p, 5);
    std::vector<float> l = logits;
    s.apply_penalties(l, history);
    EXPECT_EQ(l, logits);
  }
  {
    p.penalty_last_n = -1;
    Sampler s(p, 5);
    std::vector<float> l = logits;
    const std::vector<int32_t> bad = {1, 5};
    EXPECT_THROW(s.apply_penalties(l, bad), Error);
    EXPECT_THROW(s.sample(logits, std::vector<int32_t>{-1}), Error);
    s.apply_penalties(l, history);  // the failed calls left no counts behind
    EXPECT_EQ(l, (std::vector<float>{-0.25f, -2.75f, 0.5f, -0.75f, 0.75f}));
  }
}

TEST(Sampler, PenaltiesChangeTheSampledDistribution) {
  SamplingParams p = plain(1.0f);
  p.frequency_penalty = 0.7f;
  p.repetition_penalty = 1.3f;
  p.penalty_last_n = 4;
  const std::vector<float> logits = {1.0f, 0.2f, -0.4f, 0.8f};
  const std::vector<int32_t> history = {2, 0, 3, 0, 0};  // window: 0 x3, 3 x1, 0... -> {0, 3, 0, 0}
  const std::vector<double> want = reference_distribution(logits, p, history);
  Sampler s(p, 4);
  s.sample(logits, history);
  for (const TokenProb& tp : s.kept()) EXPECT_NEAR(tp.prob, want[size_t(tp.id)], 1e-6);
  // token 0: 1.0 / 1.3 - 2.1; token 3: 0.8 / 1.3 - 0.7; tokens 1, 2 unchanged. By hand:
  const double l0 = 1.0 / 1.3 - 2.1, l1 = 0.2, l2 = -0.4, l3 = 0.8 / 1.3 - 0.7;
  const double z = std::exp(l0) + std::exp(l1) + std::exp(l2) + std::exp(l3);
  EXPECT_NEAR(want[0], std::exp(l0) / z, 1e-6);
  EXPECT_NEAR(want[3], std::exp(l3) / z, 1e-6);
}

// ---- parameters and odd logits ------------------------------------------------------------------------

void expect_rejected(const SamplingParams& p, const std::string& name) {
  try {
    p.validate();
    ADD_FAILURE() << name << ": accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
  EXPECT_THROW(Sampler(p, 10), Error);
}

TEST(SamplingParams, ValidateRejectsBadValues) {
  SamplingParams ok;
  EXPECT_NO_THROW(ok.validate());
  EXPECT_NO_THROW(plain(0.0f).validate());
  auto with = [](auto set) {
    SamplingParams p;
    set(p);
    return p;
  };
  expect_rejected(with([](SamplingParams& p) { p.temperature = -0.1f; }), "temperature");
  expect_rejected(with([](SamplingParams& p) { p.temperature = kNaN; }), "temperature");
  expect_rejected(with([](SamplingParams& p) { p.temperature = kInf; }), "temperature");
  expect_rejected(with([](SamplingParams& p) { p.top_p = 0.0f; }), "top_p");
  expect_rejected(with([](SamplingParams& p) { p.top_p = 1.01f; }), "top_p");
  expect_rejected(with([](SamplingParams& p) { p.top_p = kNaN; }), "top_p");
  expect_rejected(with([](SamplingParams& p) { p.min_p = -0.01f; }), "min_p");
  expect_rejected(with([](SamplingParams& p) { p.min_p = 1.5f; }), "min_p");
  expect_rejected(with([](SamplingParams& p) { p.min_p = kNaN; }), "min_p");
  expect_rejected(with([](SamplingParams& p) { p.repetition_penalty = 0.0f; }), "repetition_penalty");
  expect_rejected(with([](SamplingParams& p) { p.repetition_penalty = kInf; }), "repetition_penalty");
  expect_rejected(with([](SamplingParams& p) { p.presence_penalty = 2.5f; }), "presence_penalty");
  expect_rejected(with([](SamplingParams& p) { p.presence_penalty = kNaN; }), "presence_penalty");
  expect_rejected(with([](SamplingParams& p) { p.frequency_penalty = -3.0f; }), "frequency_penalty");
  expect_rejected(with([](SamplingParams& p) { p.penalty_last_n = -2; }), "penalty_last_n");
  EXPECT_THROW(Sampler(ok, 0), Error);
  Sampler s(ok, 10);
  EXPECT_THROW(s.sample(std::vector<float>(9, 0.0f), {}), Error);  // wrong logits length
}

TEST(Sampler, NonFiniteLogits) {
  std::vector<float> logits = {0.5f, kNaN, 1.0f, -kInf, kNaN, 0.7f};
  for (const float t : {0.0f, 1.0f}) {
    SamplingParams p = plain(t);
    Sampler s(p, 6);
    for (int i = 0; i < 2000; ++i) {
      const int32_t tok = s.sample(logits, std::vector<int32_t>(size_t(i), 0));
      ASSERT_TRUE(tok == 0 || tok == 2 || tok == 5) << "drew token " << tok;
    }
  }
  // +inf wins outright; two of them split the mass evenly.
  std::vector<float> one_inf = {0.5f, kInf, 3.0f, kNaN};
  std::vector<float> two_inf = {kInf, 0.5f, kInf, 1.0f};
  Sampler s(plain(1.0f), 4);
  int first = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::vector<int32_t> h(size_t(i), 0);
    ASSERT_EQ(s.sample(one_inf, h), 1);
    const int32_t t = s.sample(two_inf, h);
    ASSERT_TRUE(t == 0 || t == 2);
    first += t == 0;
  }
  EXPECT_NEAR(first / 2000.0, 0.5, 0.05);
  // Nothing to draw: an error, greedy or not.
  const std::vector<float> none = {kNaN, -kInf, kNaN};
  EXPECT_THROW(Sampler(plain(1.0f), 3).sample(none, {}), Error);
  EXPECT_THROW(Sampler(plain(0.0f), 3).sample(none, {}), Error);
  EXPECT_THROW(Sampler(SamplingParams{}, 3).sample(none, {}), Error);
}

TEST(Sampler, TinyTemperatureActsGreedy) {
  constexpr int32_t kVocab = 2000;
  SamplingParams p = plain(1e-30f);
  Sampler s(p, kVocab);
  Sampler greedy(plain(0.0f), kVocab);
  for (uint32_t trial = 0; trial < 20; ++trial) {
    const std::vector<float> logits = random_logits(kVocab, 900 + trial);
    EXPECT_EQ(s.sample(logits, {}), greedy.sample(logits, {}));
  }
}

// ---- logprobs -----------------------------------------------------------------------------------------

TEST(Logprobs, MatchLogSoftmax) {
  constexpr int32_t kVocab = 3000;
  std::vector<float> logits = random_logits(kVocab, 31);
  logits[10] = kNaN;
  double m = -1e300;
  for (float l : logits) {
    if (!std::isnan(l)) m = std::max(m, double(l));
  }
  double z = 0;
  for (float l : logits) {
    if (!std::isnan(l)) z += std::exp(l - m);
  }
  auto ref = [&](int32_t t) { return double(logits[size_t(t)]) - m - std::log(z); };
  const TokenLogprobs lp = token_logprobs(logits, 123, 5);
  EXPECT_EQ(lp.chosen.id, 123);
  EXPECT_NEAR(lp.chosen.logprob, ref(123), 1e-4 * std::abs(ref(123)));
  ASSERT_EQ(lp.top.size(), 5u);
  std::vector<int32_t> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  order.erase(order.begin() + 10);  // the NaN
  std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                    [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(lp.top[i].id, order[i]);
    EXPECT_NEAR(lp.top[i].logprob, ref(order[i]), 1e-5 + 1e-5 * std::abs(ref(order[i])));
  }
  EXPECT_EQ(token_logprobs(logits, 10, 0).chosen.logprob, -kInf);
  EXPECT_THROW(token_logprobs(logits, kVocab, 1), Error);
  EXPECT_THROW(token_logprobs(logits, 0, kVocab + 1), Error);
}

// ---- speed (a benchmark, not a test: run with --gtest_also_run_disabled_tests) ------------------------

TEST(SamplerBench, DISABLED_Vocab128k) {
  constexpr int32_t kVocab = 128256;
  for (const Shape shape : {Shape::kPeaky, Shape::kNormal}) {
  const std::vector<float> logits = shaped_logits(kVocab, 7, shape);
  std::printf("%s logits (vocab %d)\n", shape == Shape::kPeaky ? "peaky (like an LM)" : "flat normal(0, 2)", kVocab);
  std::vector<int32_t> history(500);
  for (size_t i = 0; i < history.size(); ++i) history[i] = int32_t(i * 37 % kVocab);
  struct Setting {
    const char* name;
    SamplingParams p;
  };
  SamplingParams defaults;  // T 0.8, top_k 40, top_p 0.95, min_p 0.05
  SamplingParams k40_p95 = defaults;
  k40_p95.min_p = 0.0f;
  SamplingParams penalized = defaults;
  penalized.repetition_penalty = 1.1f;
  penalized.frequency_penalty = 0.2f;
  SamplingParams top_p_only = plain(1.0f);
  top_p_only.top_p = 0.95f;
  SamplingParams min_p_only = plain(1.0f);
  min_p_only.min_p = 0.05f;
  const std::vector<Setting> settings = {{"top_k 40, top_p 0.95", k40_p95},
                                         {"defaults (+ min_p 0.05)", defaults},
                                         {"defaults + penalties (last 64)", penalized},
                                         {"top_p 0.95 only", top_p_only},
                                         {"min_p 0.05 only", min_p_only},
                                         {"temperature 1 only", plain(1.0f)},
                                         {"greedy", plain(0.0f)}};
  for (const Setting& st : settings) {
    Sampler s(st.p, kVocab);
    constexpr int kIters = 300;
    int64_t sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kIters; ++i) {
      sink += s.sample(logits, std::span(history).first(size_t(400 + i % 100)));
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kIters;
    std::printf("  %-34s %8.1f us/token (checksum %lld)\n", st.name, us, static_cast<long long>(sink));
  }
  }
}

}  // namespace
}  // namespace ferry
