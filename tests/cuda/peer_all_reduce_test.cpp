// The one-shot peer all-reduce (backends/cuda/peer_all_reduce.h) on every visible GPU of one process (peer
// pointers: connect_local; the IPC path is what `ferry --tp N` uses, checked by scripts/device/tp_check.sh).
// Skips with fewer than 2 GPUs. Every test runs under both protocols (PeerProtocol: kLamport, kFlags).
//
// Reference: the host sum of the ranks' random inputs in rank order, in f32. Each output element is that same
// sequence of IEEE f32 additions (no multiplies, nothing to contract), so the results must equal it bit for bit
// on every rank (tolerance 0): that is also the "same bits on every rank" property the model relies on.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cuda/comm/peer_all_reduce.h"
#include "backends/cuda/cuda_backend.h"
#include "fixtures/numeric.h"
#include "formats/quant.h"
#include "ops/communicator.h"

namespace ferry {
namespace {

#define CK(x) ASSERT_EQ((x), cudaSuccess) << #x

struct Group {
  int world = 0;
  std::vector<std::unique_ptr<PeerAllReduce>> ranks;
  std::vector<cudaStream_t> streams;
  std::vector<float*> x;  // per rank: [room] f32 (room for an unaligned view at x + 1, and for the fused test's
                          // delta, residual, out and weight side by side)
  size_t cap = 0;         // the largest message, f32 values
  size_t room = 0;        // f32 values allocated per rank: 4 * cap + 4

  ~Group() {
    for (int r = 0; r < world; ++r) {
      cudaSetDevice(r);
      if (r < int(streams.size())) cudaStreamDestroy(streams[size_t(r)]);
      if (r < int(x.size())) cudaFree(x[size_t(r)]);
    }
    for (int r = 0; r < world; ++r) {
      cudaSetDevice(r);
      ranks[size_t(r)].reset();
    }
    cudaSetDevice(0);
  }
};

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

// Every visible GPU (up to kMaxWorld) as one group under `protocol`.
void make_group(Group& g, PeerProtocol protocol) {
  const int world = std::min(gpu_count(), PeerAllReduce::kMaxWorld);
  g.world = world;
  g.cap = PeerAllReduce::kMaxBytes / 4;
  g.room = 4 * g.cap + 4;
  for (int r = 0; r < world; ++r) {
    CK(cudaSetDevice(r));
    g.ranks.push_back(std::make_unique<PeerAllReduce>(r, world, PeerAllReduce::kMaxBytes, protocol));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    g.streams.push_back(s);
    float* p = nullptr;
    CK(cudaMalloc(&p, g.room * 4));
    g.x.push_back(p);
  }
  std::vector<PeerAllReduce*> all;
  for (auto& r : g.ranks) all.push_back(r.get());
  for (int r = 0; r < world; ++r) {
    CK(cudaSetDevice(r));
    g.ranks[size_t(r)]->connect_local(all);
  }
}

constexpr PeerProtocol kProtocols[] = {PeerProtocol::kLamport, PeerProtocol::kFlags};
const char* name(PeerProtocol p) { return p == PeerProtocol::kLamport ? "lamport" : "flags"; }

// Host reference: rank-ordered f32 sum. kLamport adds +0.0 to every term first (its canonicalization: -0.0
// becomes +0.0, nothing else changes).
std::vector<float> host_sum(const std::vector<std::vector<float>>& in, PeerProtocol protocol) {
  const auto term = [&](float v) { return protocol == PeerProtocol::kLamport ? v + 0.0f : v; };
  std::vector<float> s(in[0].size());
  for (size_t i = 0; i < s.size(); ++i) s[i] = term(in[0][i]);
  for (size_t r = 1; r < in.size(); ++r)
    for (size_t i = 0; i < s.size(); ++i) s[i] += term(in[r][i]);
  return s;
}

// Uploads rank r's input to x[r] + offset (synchronously: no rank's kernel is queued yet, so nothing waits).
void upload(Group& g, const std::vector<std::vector<float>>& in, size_t offset) {
  for (int r = 0; r < g.world; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaMemcpy(g.x[size_t(r)] + offset, in[size_t(r)].data(), in[size_t(r)].size() * 4, cudaMemcpyHostToDevice));
  }
}

void expect_all_equal(Group& g, const std::vector<float>& want, size_t offset, const char* what) {
  for (int r = 0; r < g.world; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaStreamSynchronize(g.streams[size_t(r)]));
    std::vector<float> got(want.size());
    CK(cudaMemcpy(got.data(), g.x[size_t(r)] + offset, got.size() * 4, cudaMemcpyDeviceToHost));
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
        << what << ": rank " << r << " n " << want.size() << " rel_l2 " << test::rel_l2(got, want);
  }
}

std::vector<std::vector<float>> inputs(int world, size_t n, uint32_t seed) {
  std::vector<std::vector<float>> in;
  for (int r = 0; r < world; ++r) in.push_back(test::random_floats(n, seed * 131u + uint32_t(r)));
  return in;
}

// Every rank's all-reduce of n values at x[r] + offset, enqueued on its stream.
void run_all(Group& g, size_t n, size_t offset = 0) {
  for (int r = 0; r < g.world; ++r) {
    CK(cudaSetDevice(r));
    g.ranks[size_t(r)]->run(g.x[size_t(r)] + offset, n, g.streams[size_t(r)]);
  }
}

TEST(PeerAllReduce, EagerSizesMatchHostSumOnEveryRank) {
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << gpu_count();
  for (const PeerProtocol protocol : kProtocols) {
    SCOPED_TRACE(name(protocol));
    Group g;
    make_group(g, protocol);
    std::vector<size_t> sizes;
    for (size_t t = 1; t <= 32; ++t) sizes.push_back(t * 4096);
    for (size_t n : {size_t(1), size_t(3), size_t(5), size_t(257), size_t(4097), size_t(12345), size_t(65537)})
      sizes.push_back(n);
    uint32_t seed = 1;
    for (size_t n : sizes) {
      for (size_t offset : {size_t(0), size_t(1)}) {  // aligned (float4 path) and unaligned (scalar path)
        ASSERT_TRUE(g.ranks[0]->fits(n));
        const auto in = inputs(g.world, n, seed++);
        upload(g, in, offset);
        run_all(g, n, offset);
        expect_all_equal(g, host_sum(in, protocol), offset, "eager");
        if (HasFatalFailure()) return;
      }
    }
    EXPECT_FALSE(g.ranks[0]->fits(g.cap + 1));
    EXPECT_FALSE(g.ranks[0]->fits(0));
  }
}

// Signed zeros and infinities among the values: kLamport's sentinel is -0.0, so a pushed -0.0 must not be taken
// for "not landed yet" (it would hang) and must sum as +0.0; every other value passes unchanged.
TEST(PeerAllReduce, SignedZerosAndSpecialValuesArrive) {
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << gpu_count();
  for (const PeerProtocol protocol : kProtocols) {
    SCOPED_TRACE(name(protocol));
    Group g;
    make_group(g, protocol);
    for (size_t n : {size_t(4096), size_t(4099)}) {  // float4 path and scalar path
      auto in = inputs(g.world, n, 900u + uint32_t(n));
      for (int r = 0; r < g.world; ++r)
        for (size_t i = 0; i < n; i += 7)  // every 7th value: -0.0, +0.0 or left as drawn, in turn
          if ((i / 7) % 3 != 2) in[size_t(r)][i] = (i / 7) % 3 == 0 ? -0.0f : 0.0f;
      in[0][5] = INFINITY;
      in[1][6] = -INFINITY;
      for (int r = 0; r < g.world; ++r) in[size_t(r)][n - 1] = -0.0f;  // every rank: -0.0 (+0.0 under kLamport)
      upload(g, in, 0);
      run_all(g, n);
      expect_all_equal(g, host_sum(in, protocol), 0, "special values");
      if (HasFatalFailure()) return;
    }
  }
}

// A step-like graph: three all-reduces of different sizes (one token, 7 tokens, an odd size at an unaligned
// address) captured once per rank, replayed 100 times with new inputs each time, eager calls in between
// (the call counter lives on the device, so the graph must keep working after them).
TEST(PeerAllReduce, CapturedGraphReplaysWithChangingInputs) {
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << gpu_count();
  for (const PeerProtocol protocol : kProtocols) {
    SCOPED_TRACE(name(protocol));
    Group g;
    make_group(g, protocol);
    struct Part {
      size_t offset, n;
    };
    const std::vector<Part> parts = {{0, 4096}, {4096, 7 * 4096}, {8 * 4096 + 1, 999}};
    std::vector<cudaGraphExec_t> exec(size_t(g.world));
    for (int r = 0; r < g.world; ++r) {
      CK(cudaSetDevice(r));
      CK(cudaStreamBeginCapture(g.streams[size_t(r)], cudaStreamCaptureModeThreadLocal));
      for (const Part& p : parts) g.ranks[size_t(r)]->run(g.x[size_t(r)] + p.offset, p.n, g.streams[size_t(r)]);
      cudaGraph_t graph;
      CK(cudaStreamEndCapture(g.streams[size_t(r)], &graph));
      CK(cudaGraphInstantiate(&exec[size_t(r)], graph, 0));
      CK(cudaGraphDestroy(graph));
    }
    for (int it = 0; it < 100; ++it) {
      std::vector<std::vector<std::vector<float>>> in;
      for (size_t k = 0; k < parts.size(); ++k) {
        in.push_back(inputs(g.world, parts[k].n, 1000u + uint32_t(it * 3) + uint32_t(k)));
        upload(g, in.back(), parts[k].offset);
      }
      for (int r = 0; r < g.world; ++r) {
        CK(cudaSetDevice(r));
        CK(cudaGraphLaunch(exec[size_t(r)], g.streams[size_t(r)]));
      }
      for (size_t k = 0; k < parts.size(); ++k) {
        expect_all_equal(g, host_sum(in[k], protocol), parts[k].offset, "graph replay");
        if (HasFatalFailure()) return;
      }
      if (it % 10 == 3) {  // an eager call of another size between replays
        const auto e = inputs(g.world, 4096 * 2 + 4, 5000u + uint32_t(it));
        upload(g, e, 0);
        run_all(g, e[0].size());
        expect_all_equal(g, host_sum(e, protocol), 0, "eager between replays");
        if (HasFatalFailure()) return;
      }
    }
    for (int r = 0; r < g.world; ++r) {
      CK(cudaSetDevice(r));
      CK(cudaGraphExecDestroy(exec[size_t(r)]));
    }
  }
}

// The fused all-reduce + residual add + RMSNorm (run_add_rms_norm), against the host: delta becomes the rank-order
// sum and residual += it bit for bit (f32 additions only); out = residual / rms * weight within 2e-6 relative
// (the device's sum of squares runs in another order than the host's double one); out is the same bits on every
// rank. Plain run() calls in between share the call counter.
TEST(PeerAllReduce, FusedAddRmsNormMatchesHost) {
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << gpu_count();
  for (const PeerProtocol protocol : kProtocols) {
    SCOPED_TRACE(name(protocol));
    Group g;
    make_group(g, protocol);
    struct Shape {
      int64_t rows, cols;
    };
    uint32_t seed = 77;
    for (const Shape sh : {Shape{1, 4096}, Shape{3, 1000}, Shape{32, 4096}, Shape{2, 8192}, Shape{5, 2048}}) {
      ASSERT_TRUE(g.ranks[0]->fits_add_rms_norm(sh.rows, sh.cols));
      const size_t n = size_t(sh.rows * sh.cols);
      // Layout of x[r]: delta [n], residual [n], out [n], weight [cols] (each a multiple of 4 floats: aligned).
      ASSERT_LE(3 * n + size_t(sh.cols), g.room);
      const auto delta = inputs(g.world, n, seed++);
      const std::vector<float> residual = test::random_floats(n, seed++);
      const std::vector<float> weight = test::random_floats(size_t(sh.cols), seed++);
      for (int r = 0; r < g.world; ++r) {
        CK(cudaSetDevice(r));
        float* base = g.x[size_t(r)];
        CK(cudaMemcpy(base, delta[size_t(r)].data(), n * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(base + n, residual.data(), n * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(base + 3 * n, weight.data(), weight.size() * 4, cudaMemcpyHostToDevice));
        g.ranks[size_t(r)]->run_add_rms_norm(base, base + n, base + 2 * n, base + 3 * n, sh.rows, sh.cols, 1e-5f,
                                             g.streams[size_t(r)]);
      }
      const std::vector<float> sum = host_sum(delta, protocol);
      std::vector<float> res(n), want(n);
      for (size_t i = 0; i < n; ++i) res[i] = residual[i] + sum[i];
      for (int64_t row = 0; row < sh.rows; ++row) {
        double ss = 0;
        for (int64_t j = 0; j < sh.cols; ++j) ss += double(res[size_t(row * sh.cols + j)]) * res[size_t(row * sh.cols + j)];
        const double scale = 1.0 / std::sqrt(ss / double(sh.cols) + 1e-5);
        for (int64_t j = 0; j < sh.cols; ++j)
          want[size_t(row * sh.cols + j)] = float(res[size_t(row * sh.cols + j)] * scale * weight[size_t(j)]);
      }
      expect_all_equal(g, sum, 0, "fused: delta");
      expect_all_equal(g, res, n, "fused: residual");
      if (HasFatalFailure()) return;
      std::vector<float> out0;
      for (int r = 0; r < g.world; ++r) {
        CK(cudaSetDevice(r));
        std::vector<float> got(n);
        CK(cudaMemcpy(got.data(), g.x[size_t(r)] + 2 * n, n * 4, cudaMemcpyDeviceToHost));
        EXPECT_LE(test::rel_l2(got, want), 2e-6) << "rank " << r << " " << sh.rows << "x" << sh.cols;
        if (r == 0) out0 = got;
        else EXPECT_EQ(std::memcmp(got.data(), out0.data(), n * 4), 0) << "rank " << r << " differs from rank 0";
      }
      // A plain all-reduce after it (same counter).
      const auto e = inputs(g.world, 4096, seed++);
      upload(g, e, 0);
      run_all(g, e[0].size());
      expect_all_equal(g, host_sum(e, protocol), 0, "plain after fused");
      if (HasFatalFailure()) return;
    }
    EXPECT_FALSE(g.ranks[0]->fits_add_rms_norm(1, 8196));   // more columns than a block takes
    EXPECT_FALSE(g.ranks[0]->fits_add_rms_norm(129, 1024));  // more rows than blocks
    EXPECT_FALSE(g.ranks[0]->fits_add_rms_norm(1, 4097));    // not float4 rows
  }
}

// A group of `world` ranks whose reductions all go through the peer all-reduce the backend holds: any call that
// reaches the communicator fails the test.
class PeerOnlyGroup final : public Communicator {
 public:
  explicit PeerOnlyGroup(int world) : world_(world) {}
  int rank() const override { return 0; }
  int world() const override { return world_; }
  void all_reduce_sum(const Tensor&) override { ADD_FAILURE() << "all_reduce_sum reached the communicator"; }
  void all_gather_inplace(const Tensor&) override { ADD_FAILURE() << "all_gather_inplace reached the communicator"; }
  void broadcast(std::vector<uint8_t>&) override {}
  void barrier() override {}
  void abort(const std::string&) noexcept override {}

 private:
  int world_;
};

// A row-parallel sublayer end at one token (CudaBackend::sublayer_end with the peer all-reduce attached: the
// projection pushes its own rows from the streamed matvec's epilogue, MatvecParams::peer_push, then
// run_add_rms_norm(pushed = true)) against matmul then run_add_rms_norm(pushed = false) on the same inputs: delta,
// residual and out the same bits on every rank. One CudaBackend per GPU; BF16 (stream_half) 4096 x 2048 and Q8_0
// (stream_quant) 4096 x 4096 shards; the two paths alternate over 3 calls each, so pushed and self-pushed calls
// share the call counter and the buffer sets.
TEST(PeerAllReduce, MatvecPushEqualsSelfPush) {
  const int world = gpu_count();
  if (world < 2) GTEST_SKIP() << "needs 2 GPUs, found " << world;
  const int n = std::min(world, PeerAllReduce::kMaxWorld);
  std::vector<std::unique_ptr<CudaBackend>> gpu;
  std::vector<std::shared_ptr<PeerAllReduce>> peer;
  std::vector<std::vector<DeviceBuffer>> keep(static_cast<size_t>(n));
  PeerOnlyGroup group(n);
  for (int r = 0; r < n; ++r) {
    CK(cudaSetDevice(r));
    CudaBackendOptions o;
    o.device_index = r;
    gpu.push_back(std::make_unique<CudaBackend>(o));
    peer.push_back(std::make_shared<PeerAllReduce>(r, n));
    gpu.back()->attach_peer_all_reduce(peer.back());
  }
  std::vector<PeerAllReduce*> all;
  for (auto& p : peer) all.push_back(p.get());
  for (int r = 0; r < n; ++r) {
    CK(cudaSetDevice(r));
    peer[size_t(r)]->connect_local(all);
  }
  const auto upload = [&](int r, DType t, std::initializer_list<int64_t> dims, const void* data) -> Tensor {
    EXPECT_EQ(cudaSetDevice(r), cudaSuccess);
    const Tensor shape = Tensor::make(t, dims, nullptr);
    keep[size_t(r)].push_back(gpu[size_t(r)]->alloc(size_t(shape.nbytes())));
    const Tensor d = Tensor::make(t, dims, keep[size_t(r)].back().data(), Device::Cuda);
    if (data != nullptr) gpu[size_t(r)]->copy_to_device(d, data, size_t(d.nbytes()));
    return d;
  };
  const int64_t dim = 4096;
  uint32_t seed = 300;
  for (const auto& [t, cols] : {std::pair{DType::BF16, int64_t(2048)}, std::pair{DType::Q8_0, int64_t(4096)}}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    std::vector<Tensor> w(static_cast<size_t>(n)), x(static_cast<size_t>(n)), norm(static_cast<size_t>(n)), res_a(static_cast<size_t>(n)), res_b(static_cast<size_t>(n));
    std::vector<Tensor> delta_a(static_cast<size_t>(n)), delta_b(static_cast<size_t>(n)), out_a(static_cast<size_t>(n)), out_b(static_cast<size_t>(n));
    const std::vector<float> residual = test::random_floats(size_t(dim), seed++, 2.0f);
    const std::vector<float> norm_w = test::random_floats(size_t(dim), seed++);
    for (int r = 0; r < n; ++r) {
      const std::vector<float> f = test::random_floats(size_t(dim * cols), seed++, 0.02f);
      std::vector<uint8_t> bytes(size_t(dim) * row_bytes(t, cols));
      for (int64_t i = 0; i < dim; ++i)
        quantize_row(t, f.data() + i * cols, bytes.data() + size_t(i) * row_bytes(t, cols), cols);
      CK(cudaSetDevice(r));
      w[size_t(r)] = gpu[size_t(r)]->prepare_weight(Tensor::make(t, {dim, cols}, bytes.data()), keep[size_t(r)]);
      x[size_t(r)] = upload(r, DType::F32, {1, cols}, nullptr);
      norm[size_t(r)] = upload(r, DType::F32, {dim}, norm_w.data());
      res_a[size_t(r)] = upload(r, DType::F32, {1, dim}, residual.data());
      res_b[size_t(r)] = upload(r, DType::F32, {1, dim}, residual.data());
      for (auto* v : {&delta_a, &delta_b, &out_a, &out_b}) (*v)[size_t(r)] = upload(r, DType::F32, {1, dim}, nullptr);
    }
    for (int call = 0; call < 3; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      for (int r = 0; r < n; ++r) {
        const std::vector<float> xv = test::random_floats(size_t(cols), seed + uint32_t(100 * call + r));
        CK(cudaSetDevice(r));
        gpu[size_t(r)]->copy_to_device(x[size_t(r)], xv.data(), xv.size() * 4);
      }
      for (const bool pushed : {true, false}) {
        for (int r = 0; r < n; ++r) {
          CK(cudaSetDevice(r));
          CudaBackend& b = *gpu[size_t(r)];
          const Tensor& delta = (pushed ? delta_a : delta_b)[size_t(r)];
          const Tensor& res = (pushed ? res_a : res_b)[size_t(r)];
          const Tensor& out = (pushed ? out_a : out_b)[size_t(r)];
          if (pushed) {
            b.sublayer_end({.out = out, .residual = res, .delta = delta, .x = x[size_t(r)], .w = w[size_t(r)],
                            .norm = norm[size_t(r)], .eps = 1e-5f, .group = &group});
          } else {
            b.matmul(delta, x[size_t(r)], w[size_t(r)], Tensor{});
            peer[size_t(r)]->run_add_rms_norm(delta.ptr<float>(), res.ptr<float>(), out.ptr<float>(),
                                              norm[size_t(r)].ptr<float>(), 1, dim, 1e-5f, b.stream(), false);
          }
        }
      }
      for (int r = 0; r < n; ++r) {
        CK(cudaSetDevice(r));
        gpu[size_t(r)]->synchronize();
        const auto get = [&](const Tensor& d) {
          std::vector<float> v(size_t(d.numel()));
          gpu[size_t(r)]->copy_to_host(v.data(), d, v.size() * 4);
          return v;
        };
        for (const auto& [a, b, what] : {std::tuple{&delta_a, &delta_b, "delta"}, std::tuple{&res_a, &res_b, "residual"},
                                         std::tuple{&out_a, &out_b, "out"}}) {
          const std::vector<float> ga = get((*a)[size_t(r)]), gb = get((*b)[size_t(r)]);
          EXPECT_EQ(std::memcmp(ga.data(), gb.data(), ga.size() * 4), 0)
              << what << " on rank " << r << ": rel L2 " << test::rel_l2(ga, gb);
        }
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    CK(cudaSetDevice(r));
    peer[size_t(r)].reset();
    gpu[size_t(r)].reset();
  }
  CK(cudaSetDevice(0));
}

}  // namespace
}  // namespace ferry

#endif  // FERRY_HAS_CUDA
