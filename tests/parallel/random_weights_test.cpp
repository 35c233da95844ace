// File-less random models (parallel/random_weights.h): "random:tiny:TYPE:SEED" must be the model `ferry gen` writes
// with that seed, bit for bit (every tensor's bytes, then the logits), and its tensor-parallel shards, generated
// directly per rank, must give the logits of the sharded file (TP2 == the file's TP2, bit for bit) and of
// world 1 (summation order only: 1e-5, as tp_cpu_test); for both inits (flat and peaked, RandomInit). The peaked
// init's logits are peaked (its purpose: tp_check's argmax gate).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>
#include <cstdio>
#include <cstring>

#include "cpu_rank.h"
#include "fixtures/batches.h"
#include "fixtures/numeric.h"
#include "fixtures/test_paths.h"
#include "model/model_file.h"
#include "model/random_model.h"
#include "parallel/random_weights.h"
#include "parallel/thread_group.h"

namespace ferry {
namespace {

constexpr int32_t kBlocks = test::kRankBlocks;
constexpr uint64_t kSeed = 7;

ModelFile gen_file(DType wt, RandomInit init) {
  return test::write_and_open_random_model(random_model_config("tiny"), wt, kSeed, init,
                                           "random_src_" + std::string(dtype_name(wt)) + "_" + random_init_name(init));
}

ModelFile file_less(DType wt, RandomInit init) {
  return open_random_model("random:tiny:" + std::string(dtype_name(wt)) + ":" + std::to_string(kSeed) +
                           (init == RandomInit::Flat ? "" : std::string(":") + random_init_name(init)));
}

// The 24-token prompt: ids below the tiny shape's 512.
std::vector<int32_t> prompt_ids() {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 24; ++i) ids.push_back((i * 37 + 11) % 512);
  return ids;
}

// Teacher-forced logits of the 24-token prompt: (24, vocab) f32.
std::vector<float> prompt_logits(LlamaModel& model) {
  const std::vector<int32_t> ids = prompt_ids();
  const Batch b = test::single_sequence_batch(ids, 0, true, kBlocks);
  std::vector<float> logits;
  model.forward(b, logits);
  return logits;
}

std::vector<float> run_world(const ModelFile& f, int world) {
  if (world == 1) {
    RankModel rm = test::make_cpu_rank(f, 0, 1, nullptr);
    return prompt_logits(*rm.model);
  }
  RankModel leader;
  ThreadTpGroup group(world);
  leader = test::make_cpu_rank(f, 0, world, &group.comm(0));
  group.start(*leader.model, [&](int rank, Communicator& comm) { return test::make_cpu_rank(f, rank, world, &comm); });
  std::vector<float> logits = prompt_logits(*leader.model);
  EXPECT_EQ(group.follower_error(), "");
  return logits;
}

class RandomWeights : public ::testing::TestWithParam<std::tuple<DType, RandomInit>> {
 protected:
  DType type() const { return std::get<0>(GetParam()); }
  RandomInit init() const { return std::get<1>(GetParam()); }
};

TEST_P(RandomWeights, TensorsEqualTheGeneratedFile) {
  const ModelFile file = gen_file(type(), init());
  const ModelFile mem = file_less(type(), init());
  EXPECT_EQ(mem.config.n_layers, file.config.n_layers);
  EXPECT_EQ(mem.config.vocab_size, file.config.vocab_size);
  EXPECT_EQ(mem.vocab.tokens, file.vocab.tokens);
  ASSERT_EQ(mem.tensors.size(), file.tensors.size());
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    const auto& [name, ft] = file.tensors[i];
    EXPECT_EQ(mem.tensors[i].first, name);
    EXPECT_EQ(mem.tensors[i].second.shape_str(), ft.shape_str()) << name;
    const Tensor* mt = mem.weights->find(name);
    ASSERT_NE(mt, nullptr) << name;
    ASSERT_EQ(mt->nbytes(), ft.nbytes()) << name;
    EXPECT_EQ(std::memcmp(mt->data, ft.data, ft.nbytes()), 0) << name;
  }
  EXPECT_EQ(mem.weights->find("no.such.tensor"), nullptr);
}

TEST_P(RandomWeights, LogitsEqualTheFileAtWorldOneAndTwo) {
  const ModelFile file = gen_file(type(), init());
  const ModelFile mem = file_less(type(), init());
  const std::vector<float> file1 = run_world(file, 1), mem1 = run_world(mem, 1);
  const std::vector<float> file2 = run_world(file, 2), mem2 = run_world(mem, 2);
  ASSERT_EQ(mem1.size(), size_t(24) * 512);
  ASSERT_EQ(mem2.size(), mem1.size());
  // Same weights, same kernels: the same bits (tolerance 0).
  EXPECT_EQ(std::memcmp(mem1.data(), file1.data(), mem1.size() * 4), 0) << "rel_l2 " << test::rel_l2(mem1, file1);
  // Each rank generated its own shard: the sharded file's values exactly.
  EXPECT_EQ(std::memcmp(mem2.data(), file2.data(), mem2.size() * 4), 0) << "rel_l2 " << test::rel_l2(mem2, file2);
  // TP2 vs TP1: the partial sums' order only (tp_cpu_test's bound).
  const double err = test::rel_l2(mem2, mem1);
  EXPECT_LE(err, 1e-5);
  std::printf("random:tiny:%s:%s TP2 vs TP1 rel_l2 %.3g\n", std::string(dtype_name(type())).c_str(),
              random_init_name(init()), err);
}

INSTANTIATE_TEST_SUITE_P(Types, RandomWeights,
                         ::testing::Combine(::testing::Values(DType::BF16, DType::Q8_0, DType::F32),
                                            ::testing::Values(RandomInit::Flat, RandomInit::Peaked)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  random_init_name(std::get<1>(info.param));
                         });

// Per position of (n, vocab) logits: the top-2 margin in standard deviations of that row's logits, and whether
// the argmax is the position's token + 1 (the peaked init's bigram).
struct LogitShape {
  double median_margin_sd = 0;
  double bigram_share = 0;
};
LogitShape logit_shape(const std::vector<float>& logits, const std::vector<int32_t>& ids, int vocab) {
  std::vector<double> margins;
  int bigram = 0;
  for (size_t p = 0; p < ids.size(); ++p) {
    const float* row = logits.data() + p * size_t(vocab);
    double mean = 0, sq = 0;
    for (int v = 0; v < vocab; ++v) mean += row[v];
    mean /= vocab;
    for (int v = 0; v < vocab; ++v) sq += (row[v] - mean) * (row[v] - mean);
    const double sd = std::sqrt(sq / vocab);
    std::vector<float> sorted(row, row + vocab);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    margins.push_back((sorted[0] - sorted[1]) / sd);
    bigram += int(std::max_element(row, row + vocab) - row) == (ids[p] + 1) % vocab;
  }
  std::sort(margins.begin(), margins.end());
  return {margins[margins.size() / 2], double(bigram) / double(ids.size())};
}

// The peaked init is what tp_check's argmax gate relies on: its top logit stands clear (median top-2 margin of
// ~1 sd of the logits against ~0.2 sd for the flat init's Gaussian logits) and is mostly the bigram's token + 1.
TEST(RandomWeightsPeaked, TopLogitStandsClearUnlikeTheFlatInit) {
  const ModelFile flat = file_less(DType::BF16, RandomInit::Flat);
  const ModelFile peaked = file_less(DType::BF16, RandomInit::Peaked);
  EXPECT_NE(peaked.config.name.find("peaked"), std::string::npos) << peaked.config.name;
  const LogitShape f = logit_shape(run_world(flat, 1), prompt_ids(), 512);
  const LogitShape p = logit_shape(run_world(peaked, 1), prompt_ids(), 512);
  std::printf("median top-2 margin / sd: flat %.3f, peaked %.3f; argmax = token + 1: flat %.2f, peaked %.2f\n",
              f.median_margin_sd, p.median_margin_sd, f.bigram_share, p.bigram_share);
  EXPECT_LT(f.median_margin_sd, 0.5);
  EXPECT_GT(p.median_margin_sd, 0.5);
  EXPECT_LE(f.bigram_share, 0.1);
  EXPECT_GE(p.bigram_share, 0.5);
}

TEST(RandomWeightsSpec, BadSpecsAreClearErrors) {
  EXPECT_THROW(open_random_model("random:"), Error);
  EXPECT_THROW(open_random_model("random:no-such-shape"), Error);
  EXPECT_THROW(open_random_model("random:tiny:q5_k"), Error);
  EXPECT_THROW(open_random_model("random:tiny:bf16:x"), Error);
  EXPECT_THROW(open_random_model("random:tiny:bf16:-5"), Error);                     // not wrapped around
  EXPECT_THROW(open_random_model("random:tiny:bf16:99999999999999999999999"), Error);  // above 2^64-1
  EXPECT_THROW(open_random_model("random:tiny:bf16:1:2"), Error);
  EXPECT_THROW(open_random_model("random:tiny:bf16:1:sharp"), Error);      // inits: flat, peaked
  EXPECT_THROW(open_random_model("random:tiny:bf16:1:peaked:2"), Error);
  EXPECT_TRUE(is_random_model_path("random:tiny"));
  EXPECT_FALSE(is_random_model_path("models/random.gguf"));
}

}  // namespace
}  // namespace ferry
