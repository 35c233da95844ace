// Mixture-of-experts models split over CPU-thread ranks (parallel/sharding.h): --tp N splits every expert's hidden
// units, --ep N places E/N whole experts on each rank. Logits and greedy tokens compared with the unsharded model
// (world 1) on the tiny Hugging Face fixtures (per-expert tensors), a written GGUF (stacked 3-D experts) and an
// in-memory random: model (each rank generating its own slices); the op itself with a part of the experts; and the
// splits that cannot be made, each one clear error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd.h"
#include "core/check.h"
#include "cpu_rank.h"
#include "fixtures/batches.h"
#include "fixtures/numeric.h"
#include "fixtures/test_paths.h"
#include "model/model_file.h"
#include "model/random_model.h"
#include "parallel/random_weights.h"
#include "parallel/sharding.h"
#include "parallel/thread_group.h"

namespace ferry {
namespace {

constexpr int32_t kBlocks = test::kRankBlocks;  // 128 tokens of context

// Qwen3-MoE layers only (no dense FFN), 12 query and 12 KV heads of 32 (split 2, 3 and 4 ways: wo's 384 columns into
// 192 / 128 / 96), 8 experts of 384 units, top-2: an expert's 384 units split into 192 / 128 / 96, whole Q8_0 blocks
// of 32 in each column slice of wo and of the experts' down.
ModelConfig moe_config() {
  ModelConfig c = random_model_config("tiny-moe");
  c.n_layers = 2;
  c.dim = 96;
  c.n_heads = 12;
  c.n_kv_heads = 12;
  c.head_dim = 32;
  c.rope_dims = 32;
  c.hidden_dim = 96;
  c.vocab_size = 301;
  c.n_experts = 8;
  c.n_experts_used = 2;
  c.expert_hidden_dim = 384;
  return c;
}

// The model as GGUF (stacked experts), peaked logits.
ModelFile write_and_open(const ModelConfig& c, DType wt, const std::string& tag) {
  return test::write_and_open_random_model(c, wt, 11, RandomInit::Peaked, "moe_tp_" + tag);
}

std::string fixture(const std::string& name) { return test::source_dir() + "/tests/fixtures/models/" + name; }

struct RunResult {
  std::vector<float> prompt_logits;  // (prompt, vocab)
  std::vector<int32_t> greedy;       // generated tokens
};

std::vector<int32_t> test_prompt() {
  std::vector<int32_t> p;
  for (int i = 0; i < 20; ++i) p.push_back((i * 37 + 11) % 301);
  return p;
}

// Teacher-forced logits of the prompt, then `steps` greedy decode steps.
RunResult run_model(LlamaModel& model, int steps) {
  RunResult r;
  const std::vector<int32_t> prompt = test_prompt();
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

RunResult run_layout(const ModelFile& f, ParallelLayout layout, CpuKernels kernels) {
  const int world = layout.world();
  if (world == 1) {
    RankModel rm = test::make_cpu_rank(f, 0, layout, nullptr, kernels);
    return run_model(*rm.model, 24);
  }
  RankModel leader;
  ThreadTpGroup group(world);  // destroyed first: it ends the followers through the leader
  leader = test::make_cpu_rank(f, 0, layout, &group.comm(0), kernels);
  group.start(*leader.model, [&](int rank, Communicator& comm) { return test::make_cpu_rank(f, rank, layout, &comm, kernels); });
  RunResult r = run_model(*leader.model, 24);
  EXPECT_EQ(group.follower_error(), "");
  return r;
}

std::string layout_name(ParallelLayout l) {
  return l.ep > 1 ? "--ep " + std::to_string(l.ep) : "--tp " + std::to_string(l.tp);
}

// Both runs' logits within `tol` (relative L2) and the same greedy tokens; the reference run is not degenerate.
void expect_matches(const RunResult& ref, const RunResult& got, double tol, const std::string& what) {
  ASSERT_EQ(got.prompt_logits.size(), ref.prompt_logits.size()) << what;
  const double err = test::rel_l2(got.prompt_logits, ref.prompt_logits);
  std::printf("%s rel_l2 %.3g\n", what.c_str(), err);
  EXPECT_LE(err, tol) << what;
  EXPECT_GT(err, -1.0) << what;  // not NaN
  EXPECT_EQ(got.greedy, ref.greedy) << what;
  EXPECT_GT(std::set<int32_t>(ref.greedy.begin(), ref.greedy.end()).size(), 1u) << what;
}

// Tolerance: the ranks hold the same weight values (splits fall on block boundaries) and every rank routes every
// token from the same bits, so only the order of the sums differs: the all-reduce adds the ranks' partial outputs
// (each expert's hidden-unit parts under --tp; each rank's experts under --ep) where world 1 adds inside one loop.
// f32 and Q8_0 on either kernel set, bf16 on the reference kernels: 1e-5 as TpCpu, with margin (measured at most
// 4.8e-7; --ep 0 at top-2, where each rank adds one term and addition commutes).
constexpr double kTol = 1e-5;

// bf16 weights on the fast kernels: the activations are rounded to bf16 before each matmul, so the summation-order
// differences upstream (1e-7) move a few elements across a rounding boundary (one bf16 ulp, 2^-8): measured rel L2
// 6.8e-4 for tiny-qwen3moe at --tp 2 and 4.0e-4 for the dense tiny-qwen3 at --tp 2 (the same effect without
// experts); the reference kernels (f32 activations) give 4.8e-7 on the same model. A wrong expert or slice moves
// the logits by O(1).
constexpr double kTolBf16Fast = 2e-3;

struct FixtureCase {
  const char* model;
  ParallelLayout layout;
  CpuKernels kernels = CpuKernels::Fast;
  double tol = kTol;
};

class MoeParallelFixture : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(MoeParallelFixture, LogitsAndGreedyTokensMatchWorldOne) {
  const FixtureCase k = GetParam();
  const ModelFile f = open_model(fixture(k.model));
  const RunResult ref = run_layout(f, {}, k.kernels);
  expect_matches(ref, run_layout(f, k.layout, k.kernels), k.tol,
                 std::string(k.model) + " " + layout_name(k.layout) +
                     (k.kernels == CpuKernels::Reference ? " reference" : " fast"));
}

// tiny-qwen3moe: 8 experts of 32 units (top-3, a dense layer 1 of 160), 2 KV heads; tiny-mixtral: 6 experts of 48
// (top-2), 2 KV heads. Both split 2 ways by --tp (the KV heads allow no more); --ep by every divisor tried of E.
INSTANTIATE_TEST_SUITE_P(Models, MoeParallelFixture,
                         ::testing::Values(FixtureCase{"tiny-qwen3moe", {.tp = 2}, CpuKernels::Fast, kTolBf16Fast},
                                           FixtureCase{"tiny-qwen3moe", {.tp = 2}, CpuKernels::Reference}, FixtureCase{"tiny-qwen3moe", {.ep = 2}},
                                           FixtureCase{"tiny-qwen3moe", {.ep = 4}}, FixtureCase{"tiny-mixtral", {.tp = 2}},
                                           FixtureCase{"tiny-mixtral", {.ep = 2}}, FixtureCase{"tiny-mixtral", {.ep = 3}}));

struct GgufCase {
  DType wt;
  ParallelLayout layout;
  CpuKernels kernels;
};

class MoeParallelGguf : public ::testing::TestWithParam<GgufCase> {};

// Stacked (E, H, dim) experts: --tp copies each expert's row / column slice out of the 3-D tensor, --ep views its
// experts. Q8_0: the fast kernels quantize the activations in blocks of 32, the same blocks in every shard.
TEST_P(MoeParallelGguf, LogitsAndGreedyTokensMatchWorldOne) {
  const GgufCase k = GetParam();
  const ModelFile f = write_and_open(moe_config(), k.wt, std::string(dtype_name(k.wt)));
  const RunResult ref = run_layout(f, {}, k.kernels);
  expect_matches(ref, run_layout(f, k.layout, k.kernels), kTol,
                 std::string(dtype_name(k.wt)) + " " + layout_name(k.layout) +
                     (k.kernels == CpuKernels::Reference ? " reference" : " fast"));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeParallelGguf,
    ::testing::Values(GgufCase{DType::F32, {.tp = 2}, CpuKernels::Fast}, GgufCase{DType::F32, {.tp = 3}, CpuKernels::Fast},
                      GgufCase{DType::F32, {.tp = 4}, CpuKernels::Fast}, GgufCase{DType::F32, {.ep = 2}, CpuKernels::Fast},
                      GgufCase{DType::F32, {.ep = 4}, CpuKernels::Fast},
                      GgufCase{DType::F32, {.tp = 3}, CpuKernels::Reference},
                      GgufCase{DType::F32, {.ep = 4}, CpuKernels::Reference},
                      GgufCase{DType::Q8_0, {.tp = 4}, CpuKernels::Fast}, GgufCase{DType::Q8_0, {.ep = 2}, CpuKernels::Fast}));

// random:tiny-moe (8 experts of 64 units, 2 KV heads), generated in memory: each rank generates only its slices of
// the stacked experts (parallel/random_weights.h).
TEST(MoeParallelRandom, InMemoryModelMatchesWorldOne) {
  const ModelFile f = open_random_model("random:tiny-moe:f32:1:peaked");
  const RunResult ref = run_layout(f, {}, CpuKernels::Fast);
  for (ParallelLayout l : {ParallelLayout{.tp = 2}, ParallelLayout{.ep = 2}, ParallelLayout{.ep = 4}})
    expect_matches(ref, run_layout(f, l, CpuKernels::Fast), kTol, "random:tiny-moe " + layout_name(l));
}

// Each rank holds exactly its part: --ep rank r's local expert i is global expert r*E/N + i (bit for bit), --tp rank
// r's gate rows and down columns are rows / columns [r*H/N, (r+1)*H/N) of every expert.
TEST(MoeParallelPlan, RanksHoldTheirOwnExpertsAndSlices) {
  const ModelConfig c = moe_config();
  const ModelFile f = write_and_open(c, DType::F32, "holdings");
  CpuBackendOptions o;
  o.n_threads = 1;
  o.simd = detect_simd();
  CpuBackend be(o);
  const auto load = [&](int rank, ParallelLayout layout) {
    return load_sharded_weights(make_shard_plan(f.config, rank, layout), *f.weights, f.gguf_names, be);
  };
  const ModelWeights whole = load(0, {});
  const LayerWeights& W = whole.layers[1];
  const int64_t H = c.expert_hidden_dim, dim = c.dim;
  for (int rank = 0; rank < 4; ++rank) {
    const ModelWeights ep = load(rank, {.ep = 4});
    const LayerWeights& L = ep.layers[1];
    ASSERT_EQ(L.ffn_gate_exps.size(), 2u);
    for (int i = 0; i < 2; ++i) {
      const size_t g = size_t(2 * rank + i);
      EXPECT_EQ(std::memcmp(L.ffn_gate_exps[size_t(i)].data, W.ffn_gate_exps[g].data, W.ffn_gate_exps[g].nbytes()), 0);
      EXPECT_EQ(std::memcmp(L.ffn_down_exps[size_t(i)].data, W.ffn_down_exps[g].data, W.ffn_down_exps[g].nbytes()), 0);
    }
    EXPECT_EQ(L.ffn_gate_inp.rows(), 8);  // the router: every expert, on every rank
    EXPECT_EQ(L.wq.rows(), W.wq.rows());  // attention whole under --ep
    EXPECT_EQ(ep.tok_embd.rows(), c.vocab_size);
  }
  for (int rank = 0; rank < 3; ++rank) {
    const ModelWeights tp = load(rank, {.tp = 3});
    const LayerWeights& L = tp.layers[1];
    ASSERT_EQ(L.ffn_gate_exps.size(), 8u);
    const int64_t Hl = H / 3;
    for (size_t e = 0; e < 8; ++e) {
      ASSERT_EQ(L.ffn_up_exps[e].rows(), Hl);
      ASSERT_EQ(L.ffn_down_exps[e].cols(), Hl);
      EXPECT_EQ(std::memcmp(L.ffn_up_exps[e].row<float>(0), W.ffn_up_exps[e].row<float>(rank * Hl), size_t(Hl * dim) * 4), 0);
      for (int64_t d = 0; d < dim; d += 17)
        EXPECT_EQ(std::memcmp(L.ffn_down_exps[e].row<float>(d), W.ffn_down_exps[e].row<float>(d) + rank * Hl, size_t(Hl) * 4), 0);
    }
  }
}

// Backend::moe_ffn with a part of the experts: the parts of 1, 2 and 4 ranks summed equal the whole op (the CPU
// backend's fast and reference kernels and the default composition), and a part alone is not the whole.
TEST(MoeParallelOp, ExpertPartsSumToTheWhole) {
  const int64_t n = 7, dim = 64, H = 32;
  const int E = 8, k = 3;
  const std::vector<float> x = test::random_floats(size_t(n * dim), 1), router = test::random_floats(size_t(E * dim), 2);
  std::vector<std::vector<float>> gate, up, down;
  for (int e = 0; e < E; ++e) {
    gate.push_back(test::random_floats(size_t(H * dim), 10 + e, 0.2f));
    up.push_back(test::random_floats(size_t(H * dim), 30 + e, 0.2f));
    down.push_back(test::random_floats(size_t(dim * H), 50 + e, 0.2f));
  }
  std::vector<Tensor> g, u, d;
  for (int e = 0; e < E; ++e) {
    g.push_back(Tensor::make(DType::F32, {H, dim}, gate[size_t(e)].data()));
    u.push_back(Tensor::make(DType::F32, {H, dim}, up[size_t(e)].data()));
    d.push_back(Tensor::make(DType::F32, {dim, H}, down[size_t(e)].data()));
  }
  for (CpuKernels kernels : {CpuKernels::Fast, CpuKernels::Reference}) {
    for (bool composed : {false, true}) {
      CpuBackendOptions o;
      o.kernels = kernels;
      o.n_threads = 1;
      o.simd = detect_simd();
      CpuBackend be(o);
      const auto run = [&](int begin, int count, std::vector<float>& out) {
        out.assign(size_t(n * dim), 0.0f);
        const MoeFfnArgs a{.out = Tensor::make(DType::F32, {n, dim}, out.data()),
                           .x = Tensor::make(DType::F32, {n, dim}, const_cast<float*>(x.data())),
                           .router = Tensor::make(DType::F32, {int64_t(E), dim}, const_cast<float*>(router.data())),
                           .gate_exps = std::span<const Tensor>(g).subspan(size_t(begin), size_t(count)),
                           .up_exps = std::span<const Tensor>(u).subspan(size_t(begin), size_t(count)),
                           .down_exps = std::span<const Tensor>(d).subspan(size_t(begin), size_t(count)),
                           .top_k = k, .norm = MoeNorm::Renormalize, .expert_begin = begin};
        if (composed) {
          be.Backend::moe_ffn(a);
        } else {
          be.moe_ffn(a);
        }
      };
      std::vector<float> whole, part;
      run(0, E, whole);
      for (int ranks : {2, 4}) {
        std::vector<float> sum(size_t(n * dim), 0.0f);
        for (int r = 0; r < ranks; ++r) {
          run(r * E / ranks, E / ranks, part);
          EXPECT_GT(test::rel_l2(part, whole), 0.05) << "a part alone is not the whole op";
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
        }
        EXPECT_LE(test::rel_l2(sum, whole), 1e-6) << ranks << " ranks, composed " << composed;
      }
    }
  }
}

std::string plan_error(const ModelConfig& c, int rank, ParallelLayout layout) {
  try {
    make_shard_plan(c, rank, layout);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(MoeParallelPlan, SplitsThatCannotBeMadeAreOneClearError) {
  const ModelFile mixtral = open_model(fixture("tiny-mixtral"));  // 6 experts
  std::string e = plan_error(mixtral.config, 0, {.ep = 4});
  EXPECT_NE(e.find("--ep 4: the model's 6 experts do not divide into 4 equal parts"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;  // one line
  EXPECT_EQ(plan_error(mixtral.config, 2, {.ep = 3}), "");
  e = plan_error(mixtral.config, 0, {.tp = 2, .ep = 2});
  EXPECT_NE(e.find("--tp 2 with --ep 2: use one of them"), std::string::npos) << e;
  ModelConfig dense = moe_config();
  dense.n_experts = 0;
  dense.n_experts_used = 0;
  e = plan_error(dense, 0, {.ep = 2});
  EXPECT_NE(e.find("--ep 2: the model has no experts"), std::string::npos) << e;
  ModelConfig odd = moe_config();
  odd.expert_hidden_dim = 320;  // 320 / 3 is not whole
  e = plan_error(odd, 0, {.tp = 3});
  EXPECT_NE(e.find("--tp 3: an expert's feed-forward size 320 does not divide into 3 equal parts"), std::string::npos)
      << e;
  EXPECT_NE(plan_error(moe_config(), 3, {.ep = 2}), "");  // rank outside the world
  // Qwen3-MoE's 768-unit experts: whole parts 2, 3 and 4 ways (384, 256, 192).
  ModelConfig qwen = moe_config();
  qwen.expert_hidden_dim = 768;
  for (int n : {2, 3, 4}) EXPECT_EQ(plan_error(qwen, n - 1, {.tp = n}), "") << n;
  const ShardPlan p = make_shard_plan(qwen, 2, ParallelLayout{.tp = 3});
  EXPECT_EQ(p.local.expert_hidden_dim, 256);
  EXPECT_EQ(p.slice_of("blk.0.ffn_down_exps.weight").begin, 512);
  EXPECT_EQ(p.slice_of("model.layers.0.mlp.experts.5.up_proj.weight").kind, ShardKind::Rows);
  EXPECT_EQ(p.slice_of("model.layers.0.block_sparse_moe.experts.5.w2.weight").kind, ShardKind::Cols);
  EXPECT_EQ(p.slice_of("blk.0.ffn_gate_inp.weight").kind, ShardKind::Replicated);  // the router
  const ShardPlan q = make_shard_plan(qwen, 1, ParallelLayout{.ep = 4});
  EXPECT_EQ(q.slice_of("blk.0.ffn_up_exps.weight").kind, ShardKind::Experts);
  EXPECT_EQ(q.slice_of("blk.0.ffn_up_exps.weight").begin, 2);
  EXPECT_EQ(q.slice_of("blk.0.attn_q.weight").kind, ShardKind::Replicated);  // attention whole under --ep
  EXPECT_EQ(q.slice_of("token_embd.weight").kind, ShardKind::Replicated);
}

// A WeightSource over host tensors held in memory.
class MapSource final : public WeightSource {
 public:
  std::map<std::string, Tensor> tensors;
  const Tensor* find(const std::string& name) const override {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
  std::string describe() const override { return "map"; }
};

// A K-quant down projection of 768-unit experts (blocks of 256 values): split 3 ways on block boundaries (each rank
// copies its 256 columns of every expert's rows), not 2 or 4 ways (384 and 192 columns): one clear line naming the
// numbers.
TEST(MoeParallelPlan, KQuantExpertSplitFallsOnBlockBoundariesOrIsAClearError) {
  ModelConfig c = moe_config();
  c.expert_hidden_dim = 768;
  const int64_t E = 2, dim = 4, H = 768;
  const size_t rb = row_bytes(DType::Q4_K, H);
  std::vector<uint8_t> bytes(size_t(E * dim) * rb);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 131 + 7);
  MapSource src;
  const std::string name = "blk.0.ffn_down_exps.weight";
  src.tensors[name] = Tensor::make(DType::Q4_K, {E, dim, H}, bytes.data());
  for (int n : {2, 4}) {
    ShardedWeightSource sharded(src, make_shard_plan(c, 1, ParallelLayout{.tp = n}));
    try {
      sharded.find(name);
      ADD_FAILURE() << "no error at --tp " << n;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("blocks of 256 values"), std::string::npos) << m;
      EXPECT_NE(m.find(std::to_string(H / n) + " of its 768 columns do not fall on block boundaries"), std::string::npos)
          << m;
    }
  }
  ShardedWeightSource three(src, make_shard_plan(c, 2, ParallelLayout{.tp = 3}));
  const Tensor* t = three.find(name);
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->n_dims, 3);
  EXPECT_EQ(t->shape[0], E);
  EXPECT_EQ(t->shape[1], dim);
  EXPECT_EQ(t->shape[2], 256);
  const size_t part = row_bytes(DType::Q4_K, 256);
  for (int64_t r = 0; r < E * dim; ++r)  // rank 2's third block of every row
    EXPECT_EQ(std::memcmp(t->row<uint8_t>(r), bytes.data() + size_t(r) * rb + 2 * part, part), 0) << r;
}

}  // namespace
}  // namespace ferry
