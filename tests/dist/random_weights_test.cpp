// File-less random models (dist/random_weights.h): "random:tiny:TYPE:SEED" must be the model `ferry gen` writes
// with that seed, bit for bit (every tensor's bytes, then the logits), and its tensor-parallel shards, generated
// directly per rank, must give the logits of the sharded file (TP2 == the file's TP2, bit for bit) and of
// world 1 (summation order only: 1e-5, as tp_cpu_test).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd.h"
#include "dist/random_weights.h"
#include "dist/sharding.h"
#include "dist/thread_group.h"
#include "fixtures/batches.h"
#include "fixtures/numeric.h"
#include "fixtures/test_paths.h"
#include "model/model_file.h"
#include "model/random_model.h"

namespace ferry {
namespace {

constexpr int32_t kBlock = 16, kBlocks = 8;
constexpr uint64_t kSeed = 7;

ModelFile gen_file(DType wt) {
  const std::string path = test::temp_path("random_src_" + std::string(dtype_name(wt)) + "_" +
                                           std::to_string(getpid()) + ".gguf");
  write_random_model(path, random_model_config("tiny"), wt, kSeed, 1);
  ModelFile f = open_model(path);
  std::remove(path.c_str());
  return f;
}

ModelFile file_less(DType wt) {
  return open_random_model("random:tiny:" + std::string(dtype_name(wt)) + ":" + std::to_string(kSeed));
}

RankModel make_rank(const ModelFile& f, int rank, int world, Communicator* comm) {
  const ShardPlan plan = make_shard_plan(f.config, rank, world);
  RankModel rm;
  CpuBackendOptions o;
  o.n_threads = 1;
  o.simd = detect_simd();
  rm.backend = std::make_unique<CpuBackend>(o);
  ModelWeights w = load_sharded_weights(plan, *f.weights, f.gguf_names, *rm.backend);
  rm.model = std::make_unique<LlamaModel>(plan.local, std::move(w), *rm.backend, KvCacheShape{kBlocks, kBlock}, 64,
                                          ParallelContext{comm, plan.vocab});
  return rm;
}

// Teacher-forced logits of one 24-token prompt: (24, vocab) f32.
std::vector<float> prompt_logits(LlamaModel& model) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 24; ++i) ids.push_back((i * 37 + 11) % 512);
  const Batch b = test::single_sequence_batch(ids, 0, true, kBlocks);
  std::vector<float> logits;
  model.forward(b, logits);
  return logits;
}

std::vector<float> run_world(const ModelFile& f, int world) {
  if (world == 1) {
    RankModel rm = make_rank(f, 0, 1, nullptr);
    return prompt_logits(*rm.model);
  }
  RankModel leader;
  ThreadTpGroup group(world);
  leader = make_rank(f, 0, world, &group.comm(0));
  group.start(*leader.model, [&](int rank, Communicator& comm) { return make_rank(f, rank, world, &comm); });
  std::vector<float> logits = prompt_logits(*leader.model);
  EXPECT_EQ(group.follower_error(), "");
  return logits;
}

class RandomWeights : public ::testing::TestWithParam<DType> {};

TEST_P(RandomWeights, TensorsEqualTheGeneratedFile) {
  const ModelFile file = gen_file(GetParam());
  const ModelFile mem = file_less(GetParam());
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
  const ModelFile file = gen_file(GetParam());
  const ModelFile mem = file_less(GetParam());
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
  std::printf("random:tiny:%s TP2 vs TP1 rel_l2 %.3g\n", std::string(dtype_name(GetParam())).c_str(), err);
}

INSTANTIATE_TEST_SUITE_P(Types, RandomWeights, ::testing::Values(DType::BF16, DType::Q8_0, DType::F32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(RandomWeightsSpec, BadSpecsAreClearErrors) {
  EXPECT_THROW(open_random_model("random:"), Error);
  EXPECT_THROW(open_random_model("random:no-such-shape"), Error);
  EXPECT_THROW(open_random_model("random:tiny:q5_k"), Error);
  EXPECT_THROW(open_random_model("random:tiny:bf16:x"), Error);
  EXPECT_THROW(open_random_model("random:tiny:bf16:-5"), Error);                     // not wrapped around
  EXPECT_THROW(open_random_model("random:tiny:bf16:99999999999999999999999"), Error);  // above 2^64-1
  EXPECT_THROW(open_random_model("random:tiny:bf16:1:2"), Error);
  EXPECT_TRUE(is_random_model_path("random:tiny"));
  EXPECT_FALSE(is_random_model_path("models/random.gguf"));
}

}  // namespace
}  // namespace ferry
