// Tensor parallelism on the CPU: N ranks as threads (ThreadCommunicator), each running its shard of a tiny
// random model; logits and greedy tokens compared with the unsharded model (world 1).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <future>
#include <set>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "core/check.h"
#include "cpu_rank.h"
#include "fixtures/batches.h"
#include "fixtures/numeric.h"
#include "fixtures/test_paths.h"
#include "model/model_file.h"
#include "model/random_model.h"
#include "parallel/sharding.h"
#include "parallel/thread_communicator.h"
#include "parallel/thread_group.h"

namespace ferry {
namespace {

// 12 query heads, 6 KV heads (GQA), head_dim 16, hidden 192, vocab 301 (not divisible by 2 or 3: the last
// rank's vocabulary part is padded). Splits 2 and 3 ways on Q4_0 block boundaries (wo: 96/64 columns, w_down:
// 96/64 columns).
ModelConfig tp_config() {
  ModelConfig c = random_model_config("tiny");
  c.n_layers = 2;
  c.dim = 96;
  c.n_heads = 12;
  c.n_kv_heads = 6;
  c.head_dim = 16;
  c.rope_dims = 16;
  c.hidden_dim = 192;
  c.vocab_size = 301;
  return c;
}

ModelFile open_random_model(const ModelConfig& c, DType wt, const std::string& tag) {
  return test::write_and_open_random_model(c, wt, 7, RandomInit::Flat, "tp_" + tag);
}

constexpr int32_t kBlocks = test::kRankBlocks;  // 128 tokens of context

struct RunResult {
  std::vector<float> prompt_logits;  // (prompt, vocab)
  std::vector<int32_t> greedy;       // generated tokens
};

// Teacher-forced logits of a prompt, then `steps` greedy decode steps.
RunResult run_model(LlamaModel& model, const std::vector<int32_t>& prompt, int steps) {
  RunResult r;
  model.forward(test::single_sequence_batch(prompt, 0, true, kBlocks), r.prompt_logits);
  const int32_t V = model.vocab().full;
  std::vector<float> logits(r.prompt_logits.end() - V, r.prompt_logits.end());
  int32_t pos = int32_t(prompt.size());
  for (int i = 0; i < steps; ++i) {
    const int32_t tok = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    r.greedy.push_back(tok);
    model.forward(test::single_sequence_batch({tok}, pos++, false, kBlocks), logits);
  }
  return r;
}

std::vector<int32_t> test_prompt() {
  std::vector<int32_t> p;
  for (int i = 0; i < 20; ++i) p.push_back((i * 37 + 11) % 301);
  return p;
}

RunResult run_world(const ModelFile& f, int world, CpuKernels kernels) {
  if (world == 1) {
    RankModel rm = test::make_cpu_rank(f, 0, 1, nullptr, kernels);
    return run_model(*rm.model, test_prompt(), 32);
  }
  RankModel leader;
  ThreadTpGroup group(world);  // destroyed first: it ends the followers through the leader
  leader = test::make_cpu_rank(f, 0, world, &group.comm(0), kernels);
  group.start(*leader.model, [&](int rank, Communicator& comm) { return test::make_cpu_rank(f, rank, world, &comm, kernels); });
  RunResult r = run_model(*leader.model, test_prompt(), 32);
  EXPECT_EQ(group.follower_error(), "");
  return r;
}

struct Case {
  DType wt;
  int world;
  CpuKernels kernels;
  double tol;  // relative L2 of the prompt logits against world 1
};

class TpCpu : public ::testing::TestWithParam<Case> {};

// f32 weights: only the order of the partial sums differs (1e-5). Quantized weights: the weight blocks and
// the activation quantization groups are the same in every shard (splits fall on block boundaries), so again
// only the summation order differs; the bound is the same order (1e-5) and holds with margin.
TEST_P(TpCpu, LogitsAndGreedyTokensMatchWorldOne) {
  const Case k = GetParam();
  const ModelConfig c = tp_config();
  const ModelFile f = open_random_model(c, k.wt, std::string(dtype_name(k.wt)));
  const RunResult ref = run_world(f, 1, k.kernels);
  const RunResult got = run_world(f, k.world, k.kernels);
  ASSERT_EQ(got.prompt_logits.size(), ref.prompt_logits.size());
  const double err = test::rel_l2(got.prompt_logits, ref.prompt_logits);
  EXPECT_LE(err, k.tol) << "world " << k.world;
  RecordProperty("rel_l2", std::to_string(err));
  std::printf("world %d %s rel_l2 %.3g\n", k.world, std::string(dtype_name(k.wt)).c_str(), err);
  EXPECT_GT(err, -1.0);  // not NaN
  EXPECT_EQ(got.greedy, ref.greedy);
  // The greedy run is not degenerate (a test that could not fail otherwise).
  EXPECT_GT(std::set<int32_t>(ref.greedy.begin(), ref.greedy.end()).size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Shapes, TpCpu,
                         ::testing::Values(Case{DType::F32, 2, CpuKernels::Reference, 1e-5},
                                           Case{DType::F32, 3, CpuKernels::Reference, 1e-5},
                                           Case{DType::F32, 2, CpuKernels::Fast, 1e-5},
                                           Case{DType::F32, 3, CpuKernels::Fast, 1e-5},
                                           Case{DType::Q8_0, 2, CpuKernels::Fast, 1e-5},
                                           Case{DType::Q4_0, 3, CpuKernels::Fast, 1e-5}));

TEST(TpCpuFailure, RankThrowingMidStepEndsEveryRankWithItsMessage) {
  const ModelConfig c = tp_config();
  const ModelFile f = open_random_model(c, DType::F32, "fail");
  auto fut = std::async(std::launch::async, [&]() -> std::string {
    RankModel leader;
    ThreadTpGroup group(2, std::chrono::seconds(20));
    leader = test::make_cpu_rank(f, 0, 2, &group.comm(0), CpuKernels::Fast);
    group.start(*leader.model, [&](int rank, Communicator& comm) {
      RankModel rm = test::make_cpu_rank(f, rank, 2, &comm, CpuKernels::Fast);
      rm.model->set_observer([](const std::string& name, int layer, const Tensor&) {
        if (name == "attn" && layer == 1) fail("injected failure in layer {}", layer);
      });
      return rm;
    });
    std::vector<float> logits;
    try {
      leader.model->forward(test::single_sequence_batch(test_prompt(), 0, false, kBlocks), logits);
    } catch (const Error& e) {
      // The group is dead: the next step fails at once with the same message.
      try {
        leader.model->forward(test::single_sequence_batch({5}, 20, false, kBlocks), logits);
      } catch (const Error& again) {
        EXPECT_STREQ(again.what(), e.what());
      }
      const std::string follower = group.wait_follower_error(std::chrono::seconds(10));
      EXPECT_NE(follower.find("injected failure in layer 1"), std::string::npos) << follower;
      return e.what();
    }
    return "no error";
  });
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "tensor-parallel group hung";
  const std::string msg = fut.get();
  EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("injected failure in layer 1"), std::string::npos) << msg;
}

TEST(TpCpuFailure, MissingRankTimesOut) {
  ThreadGroupOptions o;
  o.world = 2;
  o.timeout = std::chrono::milliseconds(200);
  auto comms = make_thread_group(o);
  std::vector<float> x = test::random_floats(16, 3);
  const Tensor t = Tensor::make(DType::F32, {16}, x.data());
  try {
    comms[0]->all_reduce_sum(t);
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
  EXPECT_THROW(comms[1]->barrier(), Error);  // the group stays failed for every rank
}

TEST(TpCpuComm, AllReduceAndGatherAgreeWithSerialSums) {
  for (int world : {2, 3, 4}) {
    ThreadGroupOptions o;
    o.world = world;
    auto comms = make_thread_group(o);
    const size_t n = 1001;  // not divisible by the world: uneven shares
    std::vector<std::vector<float>> bufs, gathers;
    std::vector<float> want(n, 0.0f);
    for (int r = 0; r < world; ++r) {
      bufs.push_back(test::random_floats(n, 10 + r));
      for (size_t i = 0; i < n; ++i) want[i] += bufs.back()[i];
      std::vector<float> g(size_t(world) * 5, -1.0f);
      for (int i = 0; i < 5; ++i) g[size_t(r) * 5 + size_t(i)] = float(r * 100 + i);
      gathers.push_back(g);
    }
    std::vector<std::thread> th;
    for (int r = 0; r < world; ++r) {
      th.emplace_back([&, r] {
        comms[size_t(r)]->all_reduce_sum(Tensor::make(DType::F32, {int64_t(n)}, bufs[size_t(r)].data()));
        comms[size_t(r)]->all_gather_inplace(Tensor::make(DType::F32, {int64_t(world) * 5}, gathers[size_t(r)].data()));
        std::vector<uint8_t> bytes;
        if (r == 0) bytes = {1, 2, 3};
        comms[size_t(r)]->broadcast(bytes);
        EXPECT_EQ(bytes, (std::vector<uint8_t>{1, 2, 3}));
      });
    }
    for (auto& t : th) t.join();
    for (int r = 0; r < world; ++r) {
      EXPECT_LE(test::rel_l2(bufs[size_t(r)], want), 1e-6);
      EXPECT_EQ(bufs[size_t(r)], bufs[0]);  // the same bits on every rank
      for (int q = 0; q < world; ++q)
        for (int i = 0; i < 5; ++i) EXPECT_EQ(gathers[size_t(r)][size_t(q) * 5 + size_t(i)], float(q * 100 + i));
    }
  }
}

TEST(TpPlan, HeadsNotDivisibleIsAClearError) {
  ModelConfig c = tp_config();  // 12 heads, 6 KV heads
  try {
    make_shard_plan(c, 0, 4);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("6 key/value heads"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_shard_plan(c, 0, 5), Error);  // 12 query heads
  EXPECT_THROW(make_shard_plan(c, 2, 2), Error);  // rank outside the world
  const ShardPlan p = make_shard_plan(c, 1, 3);
  EXPECT_EQ(p.local.n_heads, 4);
  EXPECT_EQ(p.local.n_kv_heads, 2);
  EXPECT_EQ(p.local.hidden_dim, 64);
  EXPECT_EQ(p.vocab.part, 101);
  EXPECT_EQ(p.vocab.begin, 101);
  EXPECT_EQ(p.vocab.local_rows, 102);
}

TEST(TpPlan, QuantizedSplitOffBlockBoundaryIsAClearError) {
  ModelConfig c = tp_config();
  c.hidden_dim = 160;  // 80 columns of w_down per rank at --tp 2: not whole Q4_0 blocks of 32
  const ModelFile f = open_random_model(c, DType::Q4_0, "offblock");
  IdentityCommunicator comm;
  try {
    test::make_cpu_rank(f, 0, 2, &comm, CpuKernels::Fast);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block boundaries"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry
