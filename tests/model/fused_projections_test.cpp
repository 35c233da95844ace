// Fused projections (wqkv, w_gate_up; qkv_epilogue, swiglu_fused) against the unfused path on the CPU: the
// fixture models tiny-llama (Hugging Face safetensors: NeoX RoPE), tiny-qwen2 (q/k/v biases) and tiny-qwen3
// (q/k norm) run with fusion forced on (FusingCpuBackend) and off; logits of a prompt and of greedy decode
// steps must agree to rel L2 <= 1e-5 (the CPU's fused ops reuse its own kernels and each matmul row is
// computed the same way whatever rows sit next to it, so the expected difference is float rounding at most).
// Also with --tp 2 on the thread communicator, the weights' structure, the debug observer's q/k/v, and the
// fuse_weights helpers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <span>
#include <utility>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd.h"
#include "fixtures/batches.h"
#include "fixtures/forwarding_backend.h"
#include "fixtures/numeric.h"
#include "fixtures/test_paths.h"
#include "formats/quant.h"
#include "fused_backend.h"
#include "model/fuse_weights.h"
#include "model/llama_model.h"
#include "model/model_file.h"
#include "parallel/sharding.h"
#include "parallel/thread_group.h"

namespace ferry {
namespace {

constexpr int32_t kBlock = 16;
constexpr int32_t kBlocks = 8;  // 128 tokens of context
constexpr int kDecodeSteps = 8;

std::string fixture(const std::string& name) { return test::source_dir() + "/tests/fixtures/models/" + name; }

std::unique_ptr<Backend> make_backend(bool fused, CpuKernels kernels, bool defer_norms = false) {
  CpuBackendOptions o;
  o.kernels = kernels;
  o.n_threads = 1;
  o.simd = detect_simd();
  if (fused) return std::make_unique<test::FusingCpuBackend>(o, defer_norms);
  return std::make_unique<CpuBackend>(o);
}

RankModel make_rank(const ModelFile& f, int rank, int world, Communicator* comm, bool fused, CpuKernels kernels,
                    bool defer_norms = false) {
  const ShardPlan plan = make_shard_plan(f.config, rank, world);
  RankModel rm;
  rm.backend = make_backend(fused, kernels, defer_norms);
  ModelWeights w = load_sharded_weights(plan, *f.weights, f.gguf_names, *rm.backend);
  rm.model = std::make_unique<LlamaModel>(plan.local, std::move(w), *rm.backend, KvCacheShape{kBlocks, kBlock}, 64,
                                          ParallelContext{comm, plan.vocab});
  return rm;
}

struct RunResult {
  std::vector<float> logits;  // prompt rows, then one row per decode step
  std::vector<int32_t> greedy;
};

RunResult run_model(LlamaModel& model, int32_t vocab) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back((i * 37 + 11) % vocab);
  RunResult r;
  std::vector<float> step;
  model.forward(test::single_sequence_batch(prompt, 0, true, kBlocks), step);
  r.logits = step;
  int32_t pos = int32_t(prompt.size());
  for (int i = 0; i < kDecodeSteps; ++i) {
    const auto last = step.end() - vocab;
    const int32_t tok = int32_t(std::max_element(last, step.end()) - last);
    r.greedy.push_back(tok);
    model.forward(test::single_sequence_batch({tok}, pos++, false, kBlocks), step);
    r.logits.insert(r.logits.end(), step.begin(), step.end());
  }
  return r;
}

RunResult run_world(const ModelFile& f, int world, bool fused, CpuKernels kernels) {
  const int32_t vocab = f.config.vocab_size;
  if (world == 1) {
    RankModel rm = make_rank(f, 0, 1, nullptr, fused, kernels);
    return run_model(*rm.model, vocab);
  }
  RankModel leader;
  ThreadTpGroup group(world);  // destroyed first: it ends the followers through the leader
  leader = make_rank(f, 0, world, &group.comm(0), fused, kernels);
  group.start(*leader.model,
              [&](int rank, Communicator& comm) { return make_rank(f, rank, world, &comm, fused, kernels); });
  RunResult r = run_model(*leader.model, vocab);
  EXPECT_EQ(group.follower_error(), "");
  return r;
}

struct Case {
  const char* model;
  int world;
  CpuKernels kernels;
};

class FusedProjections : public ::testing::TestWithParam<Case> {};

TEST_P(FusedProjections, LogitsMatchUnfused) {
  const Case k = GetParam();
  const ModelFile f = open_model(fixture(k.model));
  const RunResult ref = run_world(f, k.world, false, k.kernels);  // fusion off, same world
  const RunResult got = run_world(f, k.world, true, k.kernels);
  ASSERT_EQ(got.logits.size(), ref.logits.size());
  const double err = test::rel_l2(got.logits, ref.logits);
  std::printf("%s world %d fused vs unfused rel_l2 %.3g\n", k.model, k.world, err);
  EXPECT_LE(err, 1e-5);
  EXPECT_GE(err, 0.0);  // not NaN
  EXPECT_EQ(got.greedy, ref.greedy);
  // The logits are not degenerate (a comparison that could not fail otherwise).
  const auto [lo, hi] = std::minmax_element(ref.logits.begin(), ref.logits.end());
  EXPECT_GT(*hi - *lo, 1e-3f);
}

INSTANTIATE_TEST_SUITE_P(Models, FusedProjections,
                         ::testing::Values(Case{"tiny-llama", 1, CpuKernels::Reference},
                                           Case{"tiny-llama", 1, CpuKernels::Fast},
                                           Case{"tiny-qwen2", 1, CpuKernels::Reference},
                                           Case{"tiny-qwen2", 1, CpuKernels::Fast},
                                           Case{"tiny-qwen3", 1, CpuKernels::Reference},
                                           Case{"tiny-qwen3", 1, CpuKernels::Fast},
                                           Case{"tiny-llama", 2, CpuKernels::Fast},
                                           Case{"tiny-qwen2", 2, CpuKernels::Fast},
                                           Case{"tiny-qwen3", 2, CpuKernels::Fast}),
                         [](const auto& info) {
                           std::string s = std::string(info.param.model) + "_tp" + std::to_string(info.param.world) +
                                           (info.param.kernels == CpuKernels::Fast ? "_fast" : "_reference");
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// Each layer's attention norm inside its q|k|v projection (CUDA's path at one token): a CPU backend whose layer tails
// leave the next norm unwritten at every step (the residual complete, xb holding other values) makes every layer's
// rms_norm_matmul compute its own. Same logits as the fused
// path (rel L2 <= 1e-6: the same ops on the same values), and the counters show that path ran at every step.
TEST(FusedProjections, NormInProjectionMatchesFused) {
  for (const char* name : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) {
    SCOPED_TRACE(name);
    const ModelFile f = open_model(fixture(name));
    RankModel ref = make_rank(f, 0, 1, nullptr, true, CpuKernels::Fast);
    const RunResult want = run_model(*ref.model, f.config.vocab_size);
    RankModel got = make_rank(f, 0, 1, nullptr, true, CpuKernels::Fast, /*defer_norms=*/true);
    const RunResult have = run_model(*got.model, f.config.vocab_size);
    ASSERT_EQ(have.logits.size(), want.logits.size());
    EXPECT_LE(test::rel_l2(have.logits, want.logits), 1e-6);
    EXPECT_EQ(have.greedy, want.greedy);
    const auto* backend = dynamic_cast<const test::FusingCpuBackend*>(got.backend.get());
    ASSERT_NE(backend, nullptr);
    const int steps = 1 + kDecodeSteps, layers = f.config.n_layers;
    EXPECT_EQ(backend->norm_matmuls, layers * steps);
    EXPECT_EQ(backend->tails_without_norm, (layers - 1) * steps);
  }
}

// The fused load keeps one wqkv / w_gate_up per layer (and bqkv where the file has biases), not the separate
// tensors; `named` lists the file's tensors as the unfused load does.
TEST(FusedWeights, StructureAndNames) {
  for (const char* name : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) {
    const ModelFile f = open_model(fixture(name));
    const ModelConfig& c = f.config;
    auto plain = make_backend(false, CpuKernels::Fast);
    auto fusing = make_backend(true, CpuKernels::Fast);
    const ModelWeights wp = load_weights(c, *f.weights, f.gguf_names, *plain);
    const ModelWeights wf = load_weights(c, *f.weights, f.gguf_names, *fusing);
    const int64_t qkv_rows = int64_t(c.n_heads + 2 * c.n_kv_heads) * c.head_dim;
    for (const LayerWeights& L : wf.layers) {
      ASSERT_FALSE(L.wqkv.empty()) << name;
      EXPECT_EQ(L.wqkv.rows(), qkv_rows);
      EXPECT_EQ(L.wqkv.cols(), c.dim);
      EXPECT_TRUE(L.wq.empty() && L.wk.empty() && L.wv.empty());
      ASSERT_FALSE(L.w_gate_up.empty());
      EXPECT_EQ(L.w_gate_up.rows(), 2 * int64_t(c.hidden_dim));
      EXPECT_TRUE(L.w_gate.empty() && L.w_up.empty());
      EXPECT_EQ(L.bqkv.empty(), !c.qkv_bias) << name;
      EXPECT_TRUE(L.bq.empty() && L.bk.empty() && L.bv.empty());
      if (!L.bqkv.empty()) {
        EXPECT_EQ(L.bqkv.numel(), qkv_rows);
      }
    }
    for (const LayerWeights& L : wp.layers) EXPECT_TRUE(L.wqkv.empty() && L.w_gate_up.empty());
    ASSERT_EQ(wf.named.size(), wp.named.size()) << name;
    std::set<std::string> a, b;
    for (const auto& [n, t] : wf.named) a.insert(n);
    for (const auto& [n, t] : wp.named) b.insert(n);
    EXPECT_EQ(a, b) << name;
    // Rows of wqkv are wq's, then wk's, then wv's (byte for byte).
    const LayerWeights& L0 = wf.layers[0];
    const LayerWeights& P0 = wp.layers[0];
    const auto* fused = static_cast<const uint8_t*>(L0.wqkv.data);
    size_t off = 0;
    for (const Tensor* part : {&P0.wq, &P0.wk, &P0.wv}) {
      EXPECT_EQ(std::memcmp(fused + off, part->data, part->nbytes()), 0) << name;
      off += part->nbytes();
    }
    EXPECT_EQ(off, L0.wqkv.nbytes());
  }
}

// With a debug observer, the fused path still shows q, k and v (k_out / v_out of qkv_epilogue) equal to the
// unfused path's.
TEST(FusedWeights, ObserverSeesQkv) {
  const ModelFile f = open_model(fixture("tiny-qwen3"));
  std::map<std::string, std::vector<float>> seen[2];
  for (int fused = 0; fused < 2; ++fused) {
    RankModel rm = make_rank(f, 0, 1, nullptr, fused == 1, CpuKernels::Reference);
    rm.model->set_observer([&, fused](const std::string& name, int layer, const Tensor& t) {
      if (name != "q" && name != "k" && name != "v") return;
      const float* p = t.ptr<float>();
      seen[fused][name + std::to_string(layer)].assign(p, p + t.numel());
    });
    std::vector<float> logits;
    std::vector<int32_t> prompt = {3, 100, 42, 7, 300, 12};
    rm.model->forward(test::single_sequence_batch(prompt, 0, false, kBlocks), logits);
  }
  ASSERT_EQ(seen[0].size(), size_t(3 * f.config.n_layers));
  ASSERT_EQ(seen[1].size(), seen[0].size());
  for (const auto& [key, ref] : seen[0]) {
    ASSERT_TRUE(seen[1].count(key)) << key;
    EXPECT_LE(test::rel_l2(seen[1][key], ref), 1e-6) << key;
  }
}

// fuse_weights helpers: types must match; the host copy is kept only when the backend uses it in place.
TEST(FuseWeights, ConcatRowsAndBiases) {
  const int64_t cols = 64;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<Tensor> parts;
  for (const int64_t rows : {3, 5}) {
    const std::vector<float> f = test::random_floats(size_t(rows * cols), uint32_t(rows));
    bytes.emplace_back(size_t(rows) * row_bytes(DType::Q4_0, cols));
    for (int64_t r = 0; r < rows; ++r)
      quantize_row(DType::Q4_0, f.data() + r * cols, bytes.back().data() + size_t(r) * row_bytes(DType::Q4_0, cols), cols);
  }
  parts.push_back(Tensor::make(DType::Q4_0, {3, cols}, bytes[0].data()));
  parts.push_back(Tensor::make(DType::Q4_0, {5, cols}, bytes[1].data()));
  const Tensor* both[] = {&parts[0], &parts[1]};
  ASSERT_TRUE(can_fuse_rows(both));
  CpuBackend cpu(CpuBackendOptions{.kernels = CpuKernels::Reference, .n_threads = 1, .simd = SimdLevel::Scalar});
  std::vector<DeviceBuffer> keep;
  const Tensor fused = prepare_fused_rows(cpu, both, keep);
  EXPECT_EQ(fused.rows(), 8);
  EXPECT_EQ(fused.cols(), cols);
  EXPECT_EQ(keep.size(), 1u);  // the CPU uses the copy in place: kept
  EXPECT_EQ(std::memcmp(fused.data, bytes[0].data(), bytes[0].size()), 0);
  EXPECT_EQ(std::memcmp(fused.row<uint8_t>(3), bytes[1].data(), bytes[1].size()), 0);

  std::vector<float> other(size_t(2 * cols), 0.5f);
  const Tensor f32 = Tensor::make(DType::F32, {2, cols}, other.data());
  const Tensor* mixed[] = {&parts[0], &f32};
  EXPECT_FALSE(can_fuse_rows(mixed));
  const Tensor narrow = Tensor::make(DType::Q4_0, {2, 32}, bytes[0].data());
  const Tensor* uneven[] = {&parts[0], &narrow};
  EXPECT_FALSE(can_fuse_rows(uneven));

  const std::vector<float> bq = {1, 2, 3}, none, bv = {4, 5};
  const std::vector<float>* biases[] = {&bq, &none, &bv};
  const int64_t lengths[] = {3, 2, 2};
  EXPECT_EQ(concat_f32(biases, lengths), (std::vector<float>{1, 2, 3, 0, 0, 4, 5}));
}

// Parts of different types (a Q4_K_M layer's q|k in Q4_K, v in Q6_K): stackable as row ranges of their own types;
// the runs of one type reach Backend::prepare_stacked_weight as one host tensor each (q's rows then k's, copied; v
// as it is), and a backend that does not stack (the CPU's default) declines, so the model keeps the parts apart.
TEST(FuseWeights, StackRunsOfDifferentTypes) {
  const int64_t cols = 256;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<Tensor> parts;
  const std::pair<DType, int64_t> specs[] = {{DType::Q4_K, 4}, {DType::Q4_K, 2}, {DType::Q6_K, 2}};
  for (const auto& [type, rows] : specs) {
    const std::vector<float> f = test::random_floats(size_t(rows * cols), 40 + uint32_t(bytes.size()));
    bytes.emplace_back(size_t(rows) * row_bytes(type, cols));
    for (int64_t r = 0; r < rows; ++r)
      quantize_row(type, f.data() + r * cols, bytes.back().data() + size_t(r) * row_bytes(type, cols), cols);
  }
  for (size_t i = 0; i < 3; ++i) parts.push_back(Tensor::make(specs[i].first, {specs[i].second, cols}, bytes[i].data()));
  const Tensor* qkv[] = {&parts[0], &parts[1], &parts[2]};
  EXPECT_FALSE(can_fuse_rows(qkv));
  ASSERT_TRUE(can_stack_rows(qkv));
  EXPECT_EQ(type_runs(qkv), (std::vector<std::pair<size_t, size_t>>{{0, 2}, {2, 3}}));
  const Tensor* one[] = {&parts[0], &parts[1]};
  EXPECT_EQ(type_runs(one), (std::vector<std::pair<size_t, size_t>>{{0, 2}}));
  const Tensor narrow = Tensor::make(DType::Q6_K, {1, 512}, bytes[2].data());
  const Tensor* uneven[] = {&parts[0], &narrow};
  EXPECT_FALSE(can_stack_rows(uneven));

  // A backend that stacks: it sees the two runs, their rows and bytes in order.
  class Stacking final : public test::ForwardingCpuBackend {
   public:
    using ForwardingCpuBackend::ForwardingCpuBackend;
    Tensor prepare_stacked_weight(std::span<const Tensor> runs, std::vector<DeviceBuffer>&) override {
      for (const Tensor& r : runs) {
        const auto* p = static_cast<const uint8_t*>(r.data);
        seen.push_back({r.dtype, r.rows(), std::vector<uint8_t>(p, p + r.nbytes())});
      }
      return Tensor::make(DType::Stacked, {8, 256}, this);  // a marker: the caller hands it on
    }
    struct Run {
      DType type;
      int64_t rows;
      std::vector<uint8_t> bytes;
    };
    std::vector<Run> seen;
  };
  const CpuBackendOptions o{.kernels = CpuKernels::Reference, .n_threads = 1, .simd = SimdLevel::Scalar};
  Stacking stacking(o);
  std::vector<DeviceBuffer> keep;
  const Tensor stacked = prepare_stacked_rows(stacking, qkv, keep);
  EXPECT_EQ(stacked.dtype, DType::Stacked);
  ASSERT_EQ(stacking.seen.size(), 2u);
  EXPECT_EQ(stacking.seen[0].type, DType::Q4_K);
  EXPECT_EQ(stacking.seen[0].rows, 6);
  std::vector<uint8_t> qk = bytes[0];
  qk.insert(qk.end(), bytes[1].begin(), bytes[1].end());
  EXPECT_EQ(stacking.seen[0].bytes, qk);
  EXPECT_EQ(stacking.seen[1].type, DType::Q6_K);
  EXPECT_EQ(stacking.seen[1].rows, 2);
  EXPECT_EQ(stacking.seen[1].bytes, bytes[2]);
  EXPECT_EQ(row_bytes(DType::Stacked, cols), 0u);  // no layout of its own

  // The CPU backend does not stack: empty, nothing kept.
  CpuBackend cpu(o);
  EXPECT_TRUE(prepare_stacked_rows(cpu, qkv, keep).empty());
  EXPECT_TRUE(keep.empty());
}

}  // namespace
}  // namespace ferry
