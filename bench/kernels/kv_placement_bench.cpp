// KV placement harness (needs a GPU): does it matter where a decode step's KV blocks sit in the cache?
//
// A serving decode step reads, for every layer, the K and V blocks of every running sequence. The block ids
// come from the block pool; the same ids index each layer's own K and V arrays ((n_blocks, block_size,
// n_kv_heads, head_dim) bf16, one allocation per layer and per K/V, as LlamaModel allocates them). After a
// while of serving the pool's LRU free list has spread a step's ~2,500 live blocks over the whole cache (tens
// of GB), while attention_bench's decode table draws them from a cache of a few hundred MB. This harness times
// the same decode step (all layers, one captured graph, the default split plan) with the live blocks placed:
//   compact  : the first n_live ids of the pool, shuffled among the sequences (a fresh pool's order)
//   runs     : each sequence's blocks consecutive ids (a pool that hands out neighbours)
//   scattered: n_live distinct ids drawn uniformly from the whole pool (a long-running LRU pool)
// Shape: Llama-3-8B (32 layers, H 32, KVH 8, D 128, block 16), B sequences with contexts uniform in
// [ctx_lo, ctx_hi], pool of n_pool blocks per layer (serve --ctx 2048 --max-running 256: 32,768 = 1 GiB per
// array, 64 GiB over the model). bytes = K + V bytes read + q/out f32, against the 4.30 TB/s copy ceiling.
// Usage: kv_placement_bench [B ctx_lo ctx_hi n_pool n_layers]  (defaults 64 512 640 32768 32)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/attention/attention.cuh"
#include "backends/cuda/attention/decode_split.cuh"
#include "backends/cuda/common/device_errors.h"
#include "cuda_bench.h"

namespace {

using namespace ferry;

constexpr int kBlock = 16, kHeads = 32, kKvHeads = 8, kHeadDim = 128;

using bench::upload;

enum class Placement { kCompact, kRuns, kScattered };
const char* name(Placement p) {
  return p == Placement::kCompact ? "compact" : p == Placement::kRuns ? "runs" : "scattered";
}

// Block table (B, max_blocks) i32 for the sequences' block counts under placement p over a pool of n_pool.
std::vector<int32_t> make_table(Placement p, const std::vector<int>& n_blocks, int max_blocks, int n_pool,
                                std::mt19937& rng) {
  const int n_live = std::accumulate(n_blocks.begin(), n_blocks.end(), 0);
  std::vector<int32_t> ids(static_cast<size_t>(n_live));
  if (p == Placement::kScattered) {
    std::vector<int32_t> all(static_cast<size_t>(n_pool));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy_n(all.begin(), n_live, ids.begin());
  } else {
    std::iota(ids.begin(), ids.end(), 0);
    if (p == Placement::kCompact) std::shuffle(ids.begin(), ids.end(), rng);
  }
  std::vector<int32_t> table(n_blocks.size() * size_t(max_blocks), -1);
  size_t next = 0;
  for (size_t s = 0; s < n_blocks.size(); ++s)
    for (int j = 0; j < n_blocks[s]; ++j) table[s * size_t(max_blocks) + size_t(j)] = ids[next++];
  return table;
}

}  // namespace

int main(int argc, char** argv) {
  const int B = argc > 1 ? std::atoi(argv[1]) : 64;
  const int ctx_lo = argc > 2 ? std::atoi(argv[2]) : 512;
  const int ctx_hi = argc > 3 ? std::atoi(argv[3]) : 640;
  const int n_pool = argc > 4 ? std::atoi(argv[4]) : 32768;
  const int n_layers = argc > 5 ? std::atoi(argv[5]) : 32;
  if (B < 1 || ctx_lo < 1 || ctx_hi < ctx_lo || n_layers < 1 || n_pool < 1) {
    std::fprintf(stderr, "kv_placement_bench: bad arguments\n");
    return 1;
  }
  int dev = 0, n_sms = 0;
  BENCH_CUDA_CHECK(cudaGetDevice(&dev));
  BENCH_CUDA_CHECK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, dev));
  cuda_ops::DeviceErrors* errors = nullptr;
  BENCH_CUDA_CHECK(cudaMallocHost(&errors, sizeof(cuda_ops::DeviceErrors)));
  *errors = {};

  std::mt19937 rng(11);
  std::vector<int32_t> q_start(static_cast<size_t>(B)), q_len(static_cast<size_t>(B), 1), kv_len(static_cast<size_t>(B));
  std::vector<int> n_blocks(static_cast<size_t>(B));
  int max_blocks = 1, n_live = 0;
  double kv_bytes = 0;
  for (int s = 0; s < B; ++s) {
    q_start[size_t(s)] = s;
    kv_len[size_t(s)] = std::uniform_int_distribution<int>(ctx_lo, ctx_hi)(rng);
    n_blocks[size_t(s)] = (kv_len[size_t(s)] + kBlock - 1) / kBlock;
    max_blocks = std::max(max_blocks, n_blocks[size_t(s)]);
    n_live += n_blocks[size_t(s)];
    kv_bytes += double(kv_len[size_t(s)]) * kKvHeads * kHeadDim * 2 * 2;
  }
  if (n_live > n_pool) {
    std::fprintf(stderr, "kv_placement_bench: %d live blocks do not fit a pool of %d\n", n_live, n_pool);
    return 1;
  }
  const double bytes_per_layer = kv_bytes + double(B) * 2 * kHeads * kHeadDim * 4;
  const size_t array_bytes = size_t(n_pool) * kBlock * kKvHeads * kHeadDim * 2;
  std::printf("device SMs %d; B %d, contexts %d..%d (%d live blocks), pool %d blocks (%.2f GiB per array, %.1f GiB in "
              "all), %d layers\n",
              n_sms, B, ctx_lo, ctx_hi, n_live, n_pool, array_bytes / double(1 << 30),
              2.0 * n_layers * array_bytes / double(1 << 30), n_layers);

  std::vector<void*> keep;
  std::vector<void*> k_arrays, v_arrays;  // (n_pool, 16, 8, 128) bf16 each
  for (int l = 0; l < n_layers; ++l) {
    for (auto* list : {&k_arrays, &v_arrays}) {
      void* d = nullptr;
      BENCH_CUDA_CHECK(cudaMalloc(&d, array_bytes));
      BENCH_CUDA_CHECK(cudaMemset(d, 0x3C, array_bytes));  // bf16 0x3C3C = 0.0115 (speed does not depend on values)
      keep.push_back(d);
      list->push_back(d);
    }
  }
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(size_t(B) * kHeads * kHeadDim);
  for (float& x : q) x = dist(rng);
  const float* q_d = upload(q, keep);
  const int32_t* qs_d = upload(q_start, keep);
  const int32_t* ql_d = upload(q_len, keep);
  const int32_t* kl_d = upload(kv_len, keep);
  float* out = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&out, q.size() * 4));
  keep.push_back(out);

  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  std::printf("%10s | %9s %7s | %s\n", "placement", "us/layer", "% copy", "vs compact");
  double t_compact = 0;
  for (Placement p : {Placement::kCompact, Placement::kRuns, Placement::kScattered}) {
    const std::vector<int32_t> table = make_table(p, n_blocks, max_blocks, n_pool, rng);
    const int32_t* table_d = upload(table, keep);
    std::vector<cuda_ops::AttentionParams> params;
    cuda_ops::DecodeSplitPlan plan{};
    for (int l = 0; l < n_layers; ++l) {
      cuda_ops::AttentionParams ap{.out = out, .q = q_d,
                                   .k_cache = static_cast<const __nv_bfloat16*>(k_arrays[size_t(l)]),
                                   .v_cache = static_cast<const __nv_bfloat16*>(v_arrays[size_t(l)]),
                                   .q_start = qs_d, .q_len = ql_d, .kv_len = kl_d, .block_tables = table_d,
                                   .n_seqs = B, .max_blocks_per_seq = max_blocks, .block_size = kBlock,
                                   .n_blocks = n_pool, .n_tokens = B, .n_heads = kHeads, .n_kv_heads = kKvHeads,
                                   .head_dim = kHeadDim, .scale = 1.0f / std::sqrt(float(kHeadDim)), .errors = errors};
      plan = cuda_ops::plan_decode_split(ap, n_sms);
      if (l == 0) {
        ap.scratch_bytes = cuda_ops::decode_split_scratch_bytes(ap, plan);
        void* scratch = nullptr;
        BENCH_CUDA_CHECK(cudaMalloc(&scratch, ap.scratch_bytes));
        BENCH_CUDA_CHECK(cudaMemset(scratch, 0, ap.scratch_bytes));  // arrival counters start at zero
        keep.push_back(scratch);
        ap.scratch = static_cast<float*>(scratch);
      } else {
        ap.scratch = params[0].scratch;  // one stream, one call after the other: the scratch is reused
        ap.scratch_bytes = params[0].scratch_bytes;
      }
      params.push_back(ap);
    }
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    BENCH_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (const auto& ap : params) cuda_ops::decode_split_attention(ap, plan, s);
    BENCH_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    BENCH_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const double ms = bench::median_ms(s, [&] { BENCH_CUDA_CHECK(cudaGraphLaunch(exec, s)); }, 9) / n_layers;
    BENCH_CUDA_CHECK(cudaGraphExecDestroy(exec));
    BENCH_CUDA_CHECK(cudaGraphDestroy(graph));
    if (p == Placement::kCompact) t_compact = ms;
    const double pct = 100.0 * bytes_per_layer / (ms * 1e-3) / bench::kCopyBytesPerSecond;
    std::printf("%10s | %9.2f %6.1f%% | %.3f  (plan %d splits x %d)\n", name(p), ms * 1e3, pct, t_compact / ms,
                plan.n_splits, plan.chunk);
  }
  BENCH_CUDA_CHECK(cudaStreamDestroy(s));
  BENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const bool ok = errors->bits == 0;
  if (!ok) std::fprintf(stderr, "kv_placement_bench: device error bits %u\n", errors->bits);
  for (void* d : keep) cudaFree(d);
  cudaFreeHost(errors);
  return ok ? 0 : 1;
}
