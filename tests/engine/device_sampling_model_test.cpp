// LlamaModel::forward_sampled and Session's device-sampling path, run here on the CPU through a test backend
// that wraps the CPU backend and "samples on the device" with the CPU Sampler (host memory plays device memory):
// Device rows get the token Sampler(params).sample would draw from forward()'s logits at the given history length,
// Host rows get forward()'s logits bit for bit, Skip rows and rows before the last Device row cost nothing extra,
// the traffic counters count exactly the Host rows' bytes, and Session::set_history_sampled / append_sampled draw
// what set_history / append + the Sampler draw. The real device kernel is checked in tests/cuda.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "sampling/sampler.h"
#include "engine/session.h"
#include "fixtures/forwarding_backend.h"
#include "fixtures/test_paths.h"
#include "kv/block_pool.h"
#include "model/llama_model.h"
#include "model/model_file.h"

namespace ferry {
namespace {

// Every op forwarded to the CPU backend, plus sample(): the CPU Sampler per row (the engine's reference).
class SamplingCpuBackend final : public test::ForwardingCpuBackend {
 public:
  SamplingCpuBackend() : ForwardingCpuBackend(CpuBackendOptions{.kernels = CpuKernels::Reference, .n_threads = 1}) {}
  std::string name() const override { return "cpu+sampling(test)"; }

  bool supports_sampling() const override { return true; }
  // out: (m) i32; logits: (m, vocab) f32 (host memory here).
  void sample(const Tensor& out, const Tensor& logits, std::span<const SamplingParams> params,
              std::span<const uint64_t> positions, std::span<const uint64_t> mask) override {
    const int64_t m = logits.rows(), vocab = logits.cols();
    ASSERT_EQ(params.size(), size_t(m));
    ASSERT_TRUE(mask.empty());  // these tests give no output format
    ASSERT_EQ(out.numel(), m);
    ++calls;
    rows_sampled += m;
    for (int64_t i = 0; i < m; ++i) {
      Sampler s(params[size_t(i)], int32_t(vocab));
      const std::vector<int32_t> history(size_t(positions[size_t(i)]), 0);  // penalties off: only its length counts
      out.ptr<int32_t>()[i] = s.sample({logits.ptr<float>() + i * vocab, size_t(vocab)}, history);
    }
  }
  int64_t calls = 0, rows_sampled = 0;
};

constexpr int32_t kBlock = 4;

std::string tiny_llama() { return test::source_dir() + "/tests/fixtures/models/tiny-llama"; }

std::unique_ptr<LlamaModel> make_model(const ModelFile& f, Backend& backend) {
  return std::make_unique<LlamaModel>(f.config, load_weights(f.config, *f.weights, f.gguf_names, backend), backend,
                                      KvCacheShape{.n_blocks = 64, .block_size = kBlock}, 64);
}

// One prefill step of several sequences (sequence s in blocks 8s..8s+7), logits of each sequence's last token
// and of a few inner tokens.
Batch prefill_batch(const std::vector<int>& lens) {
  Batch b;
  b.max_blocks_per_seq = 8;
  uint64_t x = 12345;
  for (size_t s = 0; s < lens.size(); ++s) {
    b.q_start.push_back(b.n_tokens());
    b.q_len.push_back(lens[s]);
    b.kv_len.push_back(lens[s]);
    for (int32_t blk = 0; blk < 8; ++blk) b.block_tables.push_back(int32_t(s) * 8 + blk);
    for (int p = 0; p < lens[s]; ++p) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b.tokens.push_back(int32_t(3 + x % 500));
      b.positions.push_back(p);
      b.slots.push_back(int64_t(s) * 8 * kBlock + p);
      if (p == lens[s] - 1 || p % 5 == 2) b.logit_rows.push_back(b.n_tokens() - 1);
    }
  }
  return b;
}

TEST(DeviceSamplingModel, RowsAreDrawnOrCopiedAsTheirModeSays) {
  const ModelFile f = open_model(tiny_llama());
  SamplingCpuBackend backend;
  auto ref = make_model(f, backend);
  auto dev = make_model(f, backend);
  ASSERT_TRUE(dev->supports_device_sampling());
  const Batch b = prefill_batch({9, 3, 14, 6});
  const int64_t m = int64_t(b.logit_rows.size());
  ASSERT_GE(m, 8);
  const int64_t V = f.config.vocab_size;
  std::vector<float> logits;
  ref->forward(b, logits);
  ASSERT_EQ(logits.size(), size_t(m * V));

  // Modes cycle Device, Host, Skip, Device-greedy...; the last row is Skip, so the sampled prefix ends early.
  std::vector<RowSampling> rows(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    RowSampling& r = rows[size_t(i)];
    r.mode = i == m - 1 ? RowMode::Skip : (i % 3 == 0 ? RowMode::Device : i % 3 == 1 ? RowMode::Host : RowMode::Skip);
    r.params.temperature = i % 2 ? 0.9f : 1.3f;
    r.params.top_k = i % 4 == 0 ? 0 : 20;
    r.params.top_p = 0.9f;
    r.params.min_p = 0.0f;
    r.params.seed = uint64_t(500 + i);
    r.position = uint64_t(7 + 3 * i);
  }
  SampledStep out;
  dev->forward_sampled(b, rows, out);
  ASSERT_EQ(out.tokens.size(), size_t(m));
  int64_t n_host = 0, n_dev = 0, last_dev = -1;
  for (int64_t i = 0; i < m; ++i) {
    const RowSampling& r = rows[size_t(i)];
    if (r.mode == RowMode::Device) {
      Sampler s(r.params, int32_t(V));
      const std::vector<int32_t> history(size_t(r.position), 0);
      EXPECT_EQ(out.tokens[size_t(i)], s.sample({logits.data() + i * V, size_t(V)}, history)) << "row " << i;
      ++n_dev;
      last_dev = i;
    } else if (r.mode == RowMode::Host) {
      const float* got = out.host_logits.data() + n_host * V;
      for (int64_t v = 0; v < V; ++v) ASSERT_EQ(got[v], logits[size_t(i * V + v)]) << "row " << i << " id " << v;
      ++n_host;
    }
  }
  EXPECT_EQ(out.host_logits.size(), size_t(n_host * V));
  EXPECT_EQ(backend.calls, 1);
  EXPECT_EQ(backend.rows_sampled, last_dev + 1);  // one launch over the prefix that ends at the last Device row
  EXPECT_EQ(dev->logits_traffic().host_bytes, n_host * V * 4);
  EXPECT_EQ(dev->logits_traffic().host_rows, n_host);
  EXPECT_EQ(dev->logits_traffic().device_rows, n_dev);
  EXPECT_EQ(ref->logits_traffic().host_bytes, m * V * 4);

  // Nothing on the device: no launch, and only the Host rows cross.
  for (RowSampling& r : rows)
    if (r.mode == RowMode::Device) r.mode = RowMode::Skip;
  auto dev2 = make_model(f, backend);
  dev2->forward_sampled(b, rows, out);
  EXPECT_EQ(backend.calls, 1);
  EXPECT_EQ(dev2->logits_traffic().host_bytes, n_host * V * 4);
  EXPECT_EQ(out.host_logits.size(), size_t(n_host * V));
  // A row setting per logit row, or a clear error.
  EXPECT_THROW(dev2->forward_sampled(b, std::vector<RowSampling>(1), out), Error);
}

TEST(DeviceSamplingModel, SessionDrawsWhatTheHostSamplerDraws) {
  const ModelFile f = open_model(tiny_llama());
  SamplingCpuBackend backend;
  auto ref_model = make_model(f, backend);
  auto dev_model = make_model(f, backend);
  BlockPool ref_pool(64), dev_pool(64);
  Session ref(*ref_model, ref_pool, 60), dev(*dev_model, dev_pool, 60);
  SamplingParams p;
  p.temperature = 1.1f;
  p.top_k = 0;
  p.top_p = 0.95f;
  p.min_p = 0.0f;
  p.seed = 42;
  Sampler sampler(p, f.config.vocab_size);
  const std::vector<int32_t> prompt = {5, 80, 200, 17, 33, 9, 100, 7, 8, 250, 11};
  // (The logits first, then the history: argument evaluation order is unspecified.)
  std::span<const float> logits = ref.set_history(prompt);
  int32_t want = sampler.sample(logits, ref.history());
  int32_t got = dev.set_history_sampled(prompt, p);
  EXPECT_EQ(got, want);
  int changes = 0;
  for (int i = 0; i < 20; ++i) {
    const int32_t one[1] = {want};
    const int32_t prev = want;
    logits = ref.append(one);
    want = sampler.sample(logits, ref.history());
    got = dev.append_sampled(one, p);
    EXPECT_EQ(got, want) << "step " << i;
    changes += want != prev;
  }
  EXPECT_GT(changes, 0);
  EXPECT_EQ(dev.history(), ref.history());
  EXPECT_EQ(dev_model->logits_traffic().host_bytes, 0);
  EXPECT_EQ(dev_model->logits_traffic().device_rows, 21);
}

}  // namespace
}  // namespace ferry
