// Attention harness (needs a GPU; prints one table per section). Same shapes as bench/kernels/sdpa_bench.py,
// which prints torch SDPA's figures: run both in one device call and compare.
//   prefill: causal attention over the paged bf16 cache (block 16, blocks shuffled over the cache), H 32,
//            KVH 8 (GQA 4), head_dim 128 and 64, one launch over B sequences of L tokens (B * L = 16384).
//            FLOPs counted as for causal SDPA: 4 * B * H * L^2 * D / 2 (two matmuls, 2 FLOP per MAC, half
//            the L x L scores). Kernels: "mma" (flash_prefill.cuh, 128 x 64 tiles), "mma+dec" that then the
//            (empty) split-KV decode launch, what attention()'s two-launch path costs, "attn()" the dispatch, and
//            "wgmma" (flash_prefill_wgmma.cuh); "vs mma" is the relative L2 difference of an output from the mma
//            kernel's. Retired tile shapes and variants: docs/perf-log.md.
//   decode : one query row per sequence at context C, B sequences (each its own block table, blocks
//            shuffled), H 32, KVH 8, D 128; bytes = bf16 K + V read (B * C * 8 * 128 * 2 bytes * 2) plus the
//            f32 q and out rows, against the 4.30 TB/s copy ceiling. Several copies of the cache (>= 512 MB in
//            all) are cycled so the L2 (60 MB) never holds the next call's K/V. Timed as the same calls
//            captured in one CUDA graph and replayed (what a captured decode step sees); v1 also back to back
//            on the stream. Versions: v1 CUDA cores; tensor cores with the default plan: v2 as before dattn2 (every
//            block waits for the previous kernel first, the last block merges 8 splits at a time), v4 the first
//            ring tiles of old positions requested before the PDL wait (plan.early_kv), v5 that and the one-pass
//            merge (plan.one_pass_merge: the default); v6 the default kernel on half the splits (plan for half the
//            SMs). The output of each against v1's (relative L2); v4/v5/v6 must equal v2 bit for bit where the
//            splits are the same ("=" in the bits column).
//   mixed  : mixed serving steps (prompt chunks + decode rows), old two launches against the one-launch
//            kernel (mixed_attention.cuh) and each part alone; see bench_mixed.
//   depth  : decode at batch 1 and 64, contexts 4k-128k, at the exact table width and at a captured step's
//            power-of-two width; see bench_depth.
// Usage: attention_bench [--json FILE] [prefill|decode|depth|mixed]... (none: all).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/attention/attention.cuh"
#include "backends/cuda/attention/decode_split.cuh"
#include "backends/cuda/attention/flash_prefill.cuh"
#include "backends/cuda/attention/flash_prefill_wgmma.cuh"
#include "backends/cuda/attention/mixed_attention.cuh"
#include "backends/cuda/common/device_errors.h"
#include "cuda_bench.h"
#include "kernel_json.h"

namespace {

using namespace ferry;

constexpr double kCopyGBs = bench::kCopyBytesPerSecond / 1e9;
using bench::median_ms;  // median_ms(s, fn, iters): per call, after 3 warm-up calls

// Random bf16 bits of N(0, 1) values.
std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    float f = dist(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    x = uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  return v;
}

using bench::upload;      // upload(v, keep): a device copy, its allocation appended to keep

// n_sets independent problems of B sequences (q_len queries at the end of kv_len positions each) over one
// cache; set i's sequences use their own shuffled blocks. params[i] describes set i.
struct Problem {
  std::vector<void*> keep;
  std::vector<cuda_ops::AttentionParams> params;
  ~Problem() {
    for (void* b : keep) cudaFree(b);
  }
};

// seqs: (q_len, kv_len) per sequence. key_splits > 1: the scratch also holds mixed_attention's key-split partials
// for up to that many splits, and the sets share one scratch (calls run one after the other on one stream and
// leave its counters at zero; the partials are written and read within a call).
// table_blocks: the block tables' width (max_blocks_per_seq) when wider than the longest sequence needs (a captured
// step's power-of-two bucket), entries past a sequence's blocks -1.
void make_problem_seqs(Problem& pr, int n_sets, const std::vector<std::pair<int, int>>& seqs, int H, int KVH, int D,
                       cuda_ops::DeviceErrors* errors, int n_sms, int key_splits = 1, int table_blocks = 0) {
  const int bs = 16;
  const int B = int(seqs.size());
  int max_blocks = std::max(1, table_blocks), n_tok = 0, blocks_per_set = 0;
  for (const auto& [ql, kl] : seqs) {
    max_blocks = std::max(max_blocks, (kl + bs - 1) / bs);
    blocks_per_set += (kl + bs - 1) / bs;
    n_tok += ql;
  }
  const int64_t n_blocks = int64_t(n_sets) * blocks_per_set;
  std::vector<int32_t> perm(static_cast<size_t>(n_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  const size_t cache_elems = size_t(n_blocks) * bs * KVH * D;
  // Values: 4 MB of random bf16 tiled over each cache (speed does not depend on them; never zeros).
  auto fill = [&](uint32_t seed) {
    const std::vector<uint16_t> pattern = random_bf16(size_t(1) << 21, seed);
    std::vector<void*> tmp;
    const uint16_t* pat = upload(pattern, tmp);
    void* d = nullptr;
    BENCH_CUDA_CHECK(cudaMalloc(&d, cache_elems * 2));
    pr.keep.push_back(d);
    for (size_t i = 0; i < cache_elems; i += pattern.size())
      BENCH_CUDA_CHECK(cudaMemcpy(static_cast<uint16_t*>(d) + i, pat, std::min(pattern.size(), cache_elems - i) * 2,
                    cudaMemcpyDeviceToDevice));
    BENCH_CUDA_CHECK(cudaFree(tmp[0]));
    return static_cast<const __nv_bfloat16*>(d);
  };
  const __nv_bfloat16* kc = fill(3);
  const __nv_bfloat16* vc = fill(4);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(size_t(n_tok) * H * D);
  for (float& x : q) x = dist(rng);
  const float* qd = upload(q, pr.keep);
  const size_t nb = static_cast<size_t>(B);
  std::vector<int32_t> q_start(nb), ql(nb), kl(nb);
  for (int s = 0, row = 0; s < B; ++s) {
    q_start[size_t(s)] = row;
    ql[size_t(s)] = seqs[size_t(s)].first;
    kl[size_t(s)] = seqs[size_t(s)].second;
    row += seqs[size_t(s)].first;
  }
  const int32_t* qs_d = upload(q_start, pr.keep);
  const int32_t* ql_d = upload(ql, pr.keep);
  const int32_t* kl_d = upload(kl, pr.keep);
  for (int set = 0; set < n_sets; ++set) {
    std::vector<int32_t> table(size_t(B) * size_t(max_blocks), -1);
    size_t next = size_t(set) * size_t(blocks_per_set);
    for (int s = 0; s < B; ++s)
      for (int j = 0; j < (kl[size_t(s)] + bs - 1) / bs; ++j) table[size_t(s) * size_t(max_blocks) + size_t(j)] = perm[next++];
    void* out = nullptr;
    BENCH_CUDA_CHECK(cudaMalloc(&out, size_t(n_tok) * H * D * 4));
    pr.keep.push_back(out);
    cuda_ops::AttentionParams p{.out = static_cast<float*>(out), .q = qd, .k_cache = kc, .v_cache = vc,
                                .q_start = qs_d, .q_len = ql_d, .kv_len = kl_d,
                                .block_tables = upload(table, pr.keep), .n_seqs = B,
                                .max_blocks_per_seq = max_blocks, .block_size = bs, .n_blocks = int32_t(n_blocks),
                                .n_tokens = n_tok, .n_heads = H, .n_kv_heads = KVH, .head_dim = D,
                                .scale = 1.0f / std::sqrt(float(D)), .errors = errors};
    const cuda_ops::DecodeSplitPlan plan = cuda_ops::plan_decode_split(p, n_sms);
    p.scratch_bytes = key_splits > 1 ? cuda_ops::mixed_attention_scratch_bytes(p, plan, {.key_splits = key_splits})
                                     : cuda_ops::decode_split_scratch_bytes(p, plan);
    void* scratch = key_splits > 1 && set > 0 ? pr.params[0].scratch : nullptr;
    if (scratch == nullptr) {
      BENCH_CUDA_CHECK(cudaMalloc(&scratch, p.scratch_bytes));
      BENCH_CUDA_CHECK(cudaMemset(scratch, 0, p.scratch_bytes));  // arrival counters start at zero
      pr.keep.push_back(scratch);
    }
    p.scratch = static_cast<float*>(scratch);
    pr.params.push_back(p);
  }
}

// B sequences of q_len queries at the end of kv_len positions each.
void make_problem(Problem& pr, int n_sets, int B, int q_len, int kv_len, int H, int KVH, int D,
                  cuda_ops::DeviceErrors* errors, int n_sms) {
  make_problem_seqs(pr, n_sets, std::vector<std::pair<int, int>>(size_t(B), {q_len, kv_len}), H, KVH, D, errors, n_sms);
}

std::vector<float> download(const float* d, size_t n) {
  std::vector<float> v(n);
  BENCH_CUDA_CHECK(cudaMemcpy(v.data(), d, n * 4, cudaMemcpyDeviceToHost));
  return v;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return NAN;
    num += double(a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num / den);
}

void bench_prefill(cuda_ops::DeviceErrors* errors, int n_sms, bench::KernelJson& json) {
  std::printf("\n== prefill attention, causal, paged bf16 cache, H 32 KVH 8, B*L = 16384 (TFLOP/s = 4*B*H*L^2*D/2 / t) ==\n");
  std::printf("%4s %6s %4s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", "D", "L", "B", "mma ms", "TF/s", "mma+dec ms",
              "TF/s", "attn() ms", "TF/s", "vs mma", "wgmma ms", "TF/s", "vs mma");
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  for (const int D : {128, 64}) {
    for (const int L : {512, 1024, 2048, 4096, 8192}) {
      const int B = 16384 / L;
      Problem pr;
      make_problem(pr, 1, B, L, L, 32, 8, D, errors, n_sms);
      const cuda_ops::AttentionParams& p = pr.params[0];
      const size_t n_out = size_t(B) * L * 32 * D;
      const double flop = 4.0 * B * 32 * double(L) * double(L) * D / 2;
      // The mma.sync kernel (flash_prefill.cuh), alone and followed by the decode kernel (a mixed step's two
      // launches).
      const double t_mma = median_ms(s, [&] { cuda_ops::flash_prefill_attention(p, s); }, 15);
      const std::vector<float> o_mma = download(p.out, n_out);
      const cuda_ops::DecodeSplitPlan plan = cuda_ops::plan_decode_split(p, n_sms);
      const double t_mmad = median_ms(s, [&] {
        cuda_ops::flash_prefill_attention(p, s);
        cuda_ops::decode_split_attention(p, plan, s);
      }, 15);
      // attention(): the dispatch, told what the model's host mirrors tell it (every sequence a prompt of L rows):
      // the standalone kernel once the 128-row tiles fill a wave, else the one-launch mixed kernel.
      cuda_ops::AttentionParams pa = p;
      pa.min_q_len = pa.max_q_len = int32_t(L);
      const double t_att = median_ms(s, [&] { cuda_ops::attention(pa, s); }, 15);
      const std::vector<float> o_att = download(p.out, n_out);
      // The wgmma kernel (flash_prefill_wgmma.cuh; output poisoned first: NaN shows up).
      BENCH_CUDA_CHECK(cudaMemset(p.out, 0xFF, n_out * 4));
      cuda_ops::flash_prefill_wgmma_attention(p, s);
      const std::vector<float> o_wg = download(p.out, n_out);
      const double t_wg = median_ms(s, [&] { cuda_ops::flash_prefill_wgmma_attention(p, s); }, 15);
      std::printf("%4d %6d %4d %9.3f %9.1f %9.3f %9.1f %9.3f %9.1f %9.2e %9.3f %9.1f %9.2e\n", D, L, B, t_mma,
                  flop / t_mma * 1e-9, t_mmad, flop / t_mmad * 1e-9, t_att, flop / t_att * 1e-9, rel_l2(o_att, o_mma),
                  t_wg, flop / t_wg * 1e-9, rel_l2(o_wg, o_mma));
      const double best = std::min(std::min(t_mma, t_wg), t_att);
      const double bytes = double(B) * L * (2.0 * 32 * 4 + 2.0 * 8 * 2) * D;  // q, out f32; k, v bf16
      json.add("flash prefill attention D" + std::to_string(D) + " L" + std::to_string(L) + " B" + std::to_string(B),
               flop, bytes, best * 1e-3);
    }
  }
  BENCH_CUDA_CHECK(cudaStreamDestroy(s));
}

// Every set's scratch grown to the largest of `plans` (make_problem sized it for the default plan), counters zero.
void fit_decode_scratch(Problem& pr, const cuda_ops::DecodeSplitPlan* plans, int n_plans) {
  for (auto& p : pr.params) {
    size_t need = 0;
    for (int i = 0; i < n_plans; ++i) need = std::max(need, cuda_ops::decode_split_scratch_bytes(p, plans[i]));
    if (need > p.scratch_bytes) {
      void* scratch = nullptr;
      BENCH_CUDA_CHECK(cudaMalloc(&scratch, need));
      BENCH_CUDA_CHECK(cudaMemset(scratch, 0, need));
      pr.keep.push_back(scratch);
      p.scratch = static_cast<float*>(scratch);
      p.scratch_bytes = need;
    }
  }
}

// One decode call cycling over pr's sets; ms per call of n_calls such calls captured in one CUDA graph and
// replayed (what a captured decode step sees). Then one more call on set 0 into a NaN-poisoned output, its
// n_out floats returned in *out.
double graph_decode_ms(Problem& pr, const cuda_ops::DecodeSplitPlan& plan, int n_calls, size_t n_out,
                       cudaStream_t s, std::vector<float>* out) {
  const size_t n_sets = pr.params.size();
  size_t next = 0;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < n_calls; ++i) {
    cuda_ops::decode_split_attention(pr.params[next], plan, s);
    next = (next + 1) % n_sets;
  }
  BENCH_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  BENCH_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = median_ms(s, [&] { BENCH_CUDA_CHECK(cudaGraphLaunch(exec, s)); }, 7) / n_calls;
  BENCH_CUDA_CHECK(cudaGraphExecDestroy(exec));
  BENCH_CUDA_CHECK(cudaGraphDestroy(graph));
  BENCH_CUDA_CHECK(cudaMemset(pr.params[0].out, 0xFF, n_out * 4));  // NaN: every row must be rewritten
  cuda_ops::decode_split_attention(pr.params[0], plan, s);
  BENCH_CUDA_CHECK(cudaStreamSynchronize(s));
  *out = download(pr.params[0].out, n_out);
  return ms;
}

// Decode variants: v1 = CUDA cores (decode_split.cu, the first version); tensor cores (decode_mma.cu), default plan:
// v2 = the kernel before dattn2 (plan.early_kv and plan.one_pass_merge off), v4 = early K/V requests only, v5 = both
// (the default); v6 = v5 with the plan for half the SMs (half the splits). "vs v1": relative L2 of a variant's output
// from v1's; "bits": whether v4 / v5 equal v2 bit for bit.
void bench_decode(cuda_ops::DeviceErrors* errors, int n_sms, bench::KernelJson& json) {
  using cuda_ops::DecodeKernel;
  std::printf("\n== decode attention, H 32 KVH 8 D 128, bf16 K/V, graph-replayed calls (%% of 4300 GB/s counting K+V "
              "bf16 + q/out f32) ==\n");
  std::printf("default kernel (dispatcher): %s\n",
              cuda_ops::default_decode_kernel(128, 4) == DecodeKernel::kTensorCores ? "tensor cores (v2)" : "CUDA cores (v1)");
  std::printf("%6s %4s | %9s %8s %6s | %9s %8s %6s %8s | %8s %6s | %8s %6s %5s | %9s %8s %6s %8s | %9s\n", "ctx", "B",
              "v1 split", "us", "%", "v2 split", "us", "%", "vs v1", "v4 us", "%", "v5 us", "%", "bits", "v6 split",
              "us", "%", "vs v1", "v1 stream");
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  const std::pair<int, int> shapes[] = {{1, 160}, {1, 672}, {1, 4096}, {1, 8192}, {1, 16384}, {1, 32768}, {8, 4096},
                                        {8, 16384}, {64, 512}, {64, 640}, {64, 4096}};
  constexpr int kVariants = 5;  // v1, v2, v4, v5, v6
  for (const auto& [B, C] : shapes) {
    const double kv_bytes = double(B) * C * 8 * 128 * 2 * 2;
    const double bytes = kv_bytes + double(B) * 2 * 32 * 128 * 4;  // + q and out, f32
    const int n_sets = int(std::max(1.0, std::ceil(512e6 / kv_bytes)));
    Problem pr;
    make_problem(pr, n_sets, B, 1, C, 32, 8, 128, errors, n_sms);
    cuda_ops::DecodeSplitPlan plans[kVariants] = {
        cuda_ops::plan_decode_split(pr.params[0], n_sms, DecodeKernel::kCudaCores),
        cuda_ops::plan_decode_split(pr.params[0], n_sms, DecodeKernel::kTensorCores),
        cuda_ops::plan_decode_split(pr.params[0], n_sms, DecodeKernel::kTensorCores),
        cuda_ops::plan_decode_split(pr.params[0], n_sms, DecodeKernel::kTensorCores),
        cuda_ops::plan_decode_split(pr.params[0], n_sms / 2, DecodeKernel::kTensorCores)};  // half the splits
    plans[1].early_kv = plans[1].one_pass_merge = false;
    plans[2].one_pass_merge = false;
    fit_decode_scratch(pr, plans, kVariants);
    const size_t n_out = size_t(B) * 32 * 128;
    double t_graph[kVariants], t_stream = 0;
    std::vector<float> outs[kVariants];
    const int n_calls = std::max(20, n_sets);
    for (int v = 0; v < kVariants; ++v) {
      if (v == 0) {  // v1 also back to back on the stream
        int next = 0;
        t_stream = median_ms(s, [&] {
          for (int i = 0; i < n_calls; ++i) {
            cuda_ops::decode_split_attention(pr.params[size_t(next)], plans[0], s);
            next = (next + 1) % n_sets;
          }
        }, 5) / n_calls;
      }
      t_graph[v] = graph_decode_ms(pr, plans[v], n_calls, n_out, s, &outs[v]);
    }
    auto pct = [&](double ms) { return 100.0 * bytes / (ms * 1e-3) / bench::kCopyBytesPerSecond; };
    const bool same = std::memcmp(outs[2].data(), outs[1].data(), n_out * 4) == 0 &&
                      std::memcmp(outs[3].data(), outs[1].data(), n_out * 4) == 0;
    std::printf("%6d %4d | %4dx%-4d %8.2f %5.1f%% | %4dx%-4d %8.2f %5.1f%% %8.1e | %8.2f %5.1f%% | %8.2f %5.1f%% %5s | "
                "%4dx%-4d %8.2f %5.1f%% %8.1e | %8.2f\n",
                C, B, plans[0].n_splits, plans[0].chunk, t_graph[0] * 1e3, pct(t_graph[0]), plans[1].n_splits,
                plans[1].chunk, t_graph[1] * 1e3, pct(t_graph[1]), rel_l2(outs[1], outs[0]), t_graph[2] * 1e3,
                pct(t_graph[2]), t_graph[3] * 1e3, pct(t_graph[3]), same ? "=" : "DIFF", plans[4].n_splits,
                plans[4].chunk, t_graph[4] * 1e3, pct(t_graph[4]), rel_l2(outs[4], outs[0]), t_stream * 1e3);
    const int best = t_graph[3] <= t_graph[0] ? 3 : 0;
    json.add("decode attention ctx" + std::to_string(C) + " B" + std::to_string(B) + (best ? " tc" : " cc"),
             4.0 * B * 32 * double(C) * 128, bytes, t_graph[best] * 1e-3);
  }
  BENCH_CUDA_CHECK(cudaStreamDestroy(s));
}

// Decode at depth (issue 25 item 5): batch 1 and 64 at contexts 4k..128k, the default kernel and plan, two table
// widths: "exact" (max_blocks_per_seq = the context's blocks, the plan's bound = the context) and "graph" (the width
// a captured tg128 step at that depth has: LlamaModel rounds max_blocks_per_seq up to a power of two, so the bound is
// ~2x the context). At the graph width the default plan (plan.fit_chunk: each row cuts its own kv_len into the
// plan's splits) runs beside the same plan with chunks of plan.chunk positions ("fixed": the kernel before
// fit_chunk, half its splits empty). bits: "=" where the fit plan's output at the graph width equals the exact
// width's bit for bit (it must wherever both plans give the row the same chunks). Bytes and % as bench_decode.
// About 20 s on an H200 (the batch-64 128k cache is 34 GB).
void bench_depth(cuda_ops::DeviceErrors* errors, int n_sms, bench::KernelJson& json) {
  std::printf("\n== decode attention at depth, H 32 KVH 8 D 128, bf16 K/V, default kernel, graph-replayed calls (%% of "
              "4300 GB/s counting K+V bf16 + q/out f32) ==\n");
  std::printf("%6s %4s | %10s %8s %6s | %6s %10s | %8s %6s | %8s %6s %5s\n", "ctx", "B", "exact", "us", "%",
              "table", "graph plan", "fixed us", "%", "fit us", "%", "bits");
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  for (const int B : {1, 64}) {
    for (const int C : {4096, 8192, 16384, 32768, 131072}) {
      const double kv_bytes = double(B) * C * 8 * 128 * 2 * 2;
      const double bytes = kv_bytes + double(B) * 2 * 32 * 128 * 4;  // + q and out, f32
      const int n_sets = int(std::max(1.0, std::ceil(512e6 / kv_bytes)));
      int table = 1;  // the graph's bucket for the last step of tg128 at depth C: blocks of C + 128 positions
      while (table < (C + 128 + 15) / 16) table *= 2;
      Problem pr;
      make_problem_seqs(pr, n_sets, std::vector<std::pair<int, int>>(size_t(B), {1, C}), 32, 8, 128, errors, n_sms, 1,
                        table);
      cuda_ops::AttentionParams exact_p = pr.params[0];
      exact_p.max_blocks_per_seq = (C + 15) / 16;  // the plan only: the tables keep their width
      cuda_ops::DecodeSplitPlan plans[3] = {cuda_ops::plan_decode_split(exact_p, n_sms),
                                            cuda_ops::plan_decode_split(pr.params[0], n_sms),
                                            cuda_ops::plan_decode_split(pr.params[0], n_sms)};
      plans[1].fit_chunk = false;
      fit_decode_scratch(pr, plans, 3);
      const size_t n_out = size_t(B) * 32 * 128;
      double t[3];
      std::vector<float> outs[3];
      for (int v = 0; v < 3; ++v) t[v] = graph_decode_ms(pr, plans[v], std::max(20, n_sets), n_out, s, &outs[v]);
      auto pct = [&](double ms) { return 100.0 * bytes / (ms * 1e-3) / bench::kCopyBytesPerSecond; };
      const bool same = std::memcmp(outs[2].data(), outs[0].data(), n_out * 4) == 0;
      std::printf("%6d %4d | %4dx%-5d %8.2f %5.1f%% | %6d %4dx%-5d | %8.2f %5.1f%% | %8.2f %5.1f%% %5s\n", C, B,
                  plans[0].n_splits, plans[0].chunk, t[0] * 1e3, pct(t[0]), table, plans[2].n_splits, plans[2].chunk,
                  t[1] * 1e3, pct(t[1]), t[2] * 1e3, pct(t[2]), same ? "=" : "DIFF");
      for (const int v : {0, 2})
        json.add("decode attention depth ctx" + std::to_string(C) + " B" + std::to_string(B) +
                     (v == 0 ? " exact" : " graph"),
                 4.0 * B * 32 * double(C) * 128, bytes, t[v] * 1e-3);
    }
  }
  BENCH_CUDA_CHECK(cudaStreamDestroy(s));
}

// Mixed serving steps (issue 4): prompt chunks beside decode rows, H 32, KVH 8, D 128, block 16, shuffled blocks.
// Versions, each timed as back-to-back calls on the stream (PDL between them, as in an eager step) cycling
// over several copies of the cache (>= 512 MB of decode K/V in all, so the L2 never holds the next call's):
//   old       : flash prefill (128-row tiles, plain launch) then split-KV decode (2 launches);
//   pre128    : the prefill launch alone; dec: the decode launch alone;
//   mixed RxS : mixed_attention, R-row prefill tiles, S prefill slots per SM (one launch);
//   mixRxSkK  : the same with prompt tiles' keys split over up to K blocks (key_splits K, min_split_key_tiles 2);
//   rule      : the dispatch's tiles and slots with mixed_key_splits' K (the proposal, not yet attention()'s);
//   attn()    : the dispatch (its bench params carry no host q_len: a captured step's view);
//   wg+dec    : the wgmma prefill kernel on a grid of the step's prefill tiles, then the decode kernel; wg: that
//               prefill launch alone.
// Every full version's output is compared with old's ("=" bit-identical, else relative L2; key splits change the
// rounding of P: ~1-1.6e-3 predicted by an emulation of the tile arithmetic).
void bench_mixed(cuda_ops::DeviceErrors* errors, int n_sms, bench::KernelJson& json) {
  using cuda_ops::MixedAttentionConfig;
  std::printf("\n== mixed steps: prompt chunks + decode rows, H 32 KVH 8 D 128, bf16 paged K/V, block 16; us per "
              "call (back-to-back on the stream) ==\n");
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  struct Case {
    const char* name;
    std::vector<std::pair<int, int>> prompts;  // (q_len, kv_len)
    int n_decode;                               // decode rows at contexts 512..640
  };
  const Case cases[] = {
      {"460 new + 50 dec", {{460, 460}}, 50},
      {"460 on 512 + 50 dec", {{460, 972}}, 50},
      {"230 new + 230 on 512 + 50 dec", {{230, 230}, {230, 742}}, 50},
      {"64 dec (decode step)", {}, 64},
      {"512 new (prefill only)", {{512, 512}}, 0},
      {"2048 new (prefill only)", {{2048, 2048}}, 0},
  };
  for (const Case& c : cases) {
    std::vector<std::pair<int, int>> seqs = c.prompts;
    for (int i = 0; i < c.n_decode; ++i) seqs.emplace_back(1, 512 + (i * 37) % 129);
    double kv_bytes = 0, flop = 0;
    int n_tok = 0;
    for (const auto& [ql, kl] : seqs) {
      kv_bytes += double(kl) * 8 * 128 * 2 * 2;
      n_tok += ql;
      if (ql >= 2) flop += 4.0 * 32 * 128 * double(ql) * (double(kl) - ql / 2.0);
    }
    const int n_sets = int(std::max(1.0, std::ceil(512e6 / kv_bytes)));
    Problem pr;
    make_problem_seqs(pr, n_sets, seqs, 32, 8, 128, errors, n_sms, cuda_ops::kMaxKeySplits);
    const cuda_ops::DecodeSplitPlan plan = cuda_ops::plan_decode_split(pr.params[0], n_sms);
    const size_t n_out = size_t(n_tok) * 32 * 128;
    int next = 0;
    auto timed = [&](const std::function<void(const cuda_ops::AttentionParams&)>& f) {
      const int n_calls = std::max(20, n_sets);
      return median_ms(s, [&] {
        for (int i = 0; i < n_calls; ++i) {
          f(pr.params[size_t(next)]);
          next = (next + 1) % n_sets;
        }
      }, 7) / n_calls * 1e3;
    };
    auto output = [&](const std::function<void(const cuda_ops::AttentionParams&)>& f) {
      BENCH_CUDA_CHECK(cudaMemset(pr.params[0].out, 0xFF, n_out * 4));  // NaN: every row must be rewritten
      f(pr.params[0]);
      BENCH_CUDA_CHECK(cudaStreamSynchronize(s));
      return download(pr.params[0].out, n_out);
    };
    struct Version {
      std::string name;
      std::function<void(const cuda_ops::AttentionParams&)> f;
      bool full;  // writes every row
    };
    std::vector<Version> vs = {
        {"old", [&](const cuda_ops::AttentionParams& p) {
           cuda_ops::flash_prefill_attention(p, s);
           cuda_ops::decode_split_attention(p, plan, s);
         }, true},
        {"pre128", [&](const cuda_ops::AttentionParams& p) { cuda_ops::flash_prefill_attention(p, s); }, false},
        {"dec", [&](const cuda_ops::AttentionParams& p) { cuda_ops::decode_split_attention(p, plan, s); }, false},
    };
    for (const int rows : {64, 128}) {
      for (const int slots : {1, 2}) {
        vs.push_back({"mix" + std::to_string(rows) + "x" + std::to_string(slots),
                      [&, rows, slots](const cuda_ops::AttentionParams& p) {
                        cuda_ops::mixed_attention(p, plan, s, MixedAttentionConfig{.tile_rows = rows, .slots_per_sm = slots});
                      }, true});
      }
    }
    // Key splits: 64-row tiles at 1 and 2 slots per SM, 128-row tiles (long prompts) at 2.
    for (const auto& [rows, slots] : {std::pair<int, int>{64, 1}, {64, 2}, {128, 2}}) {
      for (const int k : {2, 4}) {
        const MixedAttentionConfig cfg{.tile_rows = rows, .slots_per_sm = slots, .key_splits = k};
        if (!cuda_ops::mixed_key_splits_fit(pr.params[0], plan, cfg)) continue;
        vs.push_back({"mix" + std::to_string(rows) + "x" + std::to_string(slots) + "k" + std::to_string(k),
                      [&, cfg](const cuda_ops::AttentionParams& p) { cuda_ops::mixed_attention(p, plan, s, cfg); },
                      true});
      }
    }
    // The dispatch's tile rows and slots (attention.cu's mixed_config) with the proposed split.
    const int rule_rows = int64_t(n_tok) / 128 * 32 >= int64_t(2) * n_sms ? 128 : 64;
    const int rule_slots = rule_rows == 64 && int64_t(n_tok) / 64 * 32 <= int64_t(2) * n_sms ? 1 : 2;
    const MixedAttentionConfig rule{.tile_rows = rule_rows, .slots_per_sm = rule_slots,
                                    .key_splits = cuda_ops::mixed_key_splits(pr.params[0], plan, rule_rows, n_sms)};
    vs.push_back({"rule", [&, rule](const cuda_ops::AttentionParams& p) {
                    cuda_ops::mixed_attention(p, plan, s, rule);
                  }, true});
    // The same without the decode blocks' early K/V requests and one-pass merge (the mixed kernel before 2026-11-30).
    cuda_ops::DecodeSplitPlan late_plan = plan;
    late_plan.early_kv = late_plan.one_pass_merge = false;
    vs.push_back({"rule-late", [&, rule, late_plan](const cuda_ops::AttentionParams& p) {
                    cuda_ops::mixed_attention(p, late_plan, s, rule);
                  }, true});
    vs.push_back({"attn()", [&](const cuda_ops::AttentionParams& p) { cuda_ops::attention(p, s); }, true});
    // Two launches on the wgmma prefill kernel, its grid bounded by the step's prefill tiles, then the decode kernel
    // (2026-11-30: lost to the one-launch kernel on mixed steps, won on prompt-only ones); "wg": its prefill alone.
    int32_t tiles = 0;
    for (const auto& [ql, kl] : seqs)
      if (ql >= 2) tiles += (ql + 127) / 128;
    const auto with_tiles = [tiles](const cuda_ops::AttentionParams& p) {
      cuda_ops::AttentionParams q = p;
      q.prefill_tiles = tiles;
      return q;
    };
    if (tiles > 0) {
      vs.push_back({"wg+dec", [&](const cuda_ops::AttentionParams& p) {
                      const cuda_ops::AttentionParams q = with_tiles(p);
                      cuda_ops::flash_prefill_wgmma_attention(q, s);
                      cuda_ops::decode_split_attention(q, plan, s);
                    }, true});
      vs.push_back({"wg", [&](const cuda_ops::AttentionParams& p) {
                      cuda_ops::flash_prefill_wgmma_attention(with_tiles(p), s);
                    }, false});
    }
    std::printf("%s (%d sequences, %d rows; prefill %.2f GFLOP, K/V %.1f MB; decode plan %d x %d; rule: %d-row "
                "tiles, key_splits %d):\n", c.name, int(seqs.size()), n_tok, flop * 1e-9, kv_bytes * 1e-6,
                plan.n_splits, plan.chunk, rule.tile_rows, rule.key_splits);
    std::vector<float> ref;
    double best = 1e30;
    for (const Version& v : vs) {
      const double us = timed(v.f);
      std::string cmp = "-";
      if (v.full) {
        const std::vector<float> o = output(v.f);
        if (ref.empty()) {
          ref = o;
          cmp = "(ref)";
        } else if (std::memcmp(o.data(), ref.data(), o.size() * 4) == 0) {
          cmp = "=";
        } else {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.2e", rel_l2(o, ref));
          cmp = buf;
        }
        if (v.name != "old") best = std::min(best, us);
      }
      std::printf("  %-10s %9.2f us  %s\n", v.name.c_str(), us, cmp.c_str());
    }
    json.add(std::string("mixed attention ") + c.name, flop, kv_bytes, best * 1e-6);
  }
  BENCH_CUDA_CHECK(cudaStreamDestroy(s));
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  std::vector<std::string> want;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      want.emplace_back(argv[i]);
    }
  }
  auto wanted = [&](const char* w) { return want.empty() || std::find(want.begin(), want.end(), w) != want.end(); };
  int dev = 0, n_sms = 0;
  BENCH_CUDA_CHECK(cudaGetDevice(&dev));
  BENCH_CUDA_CHECK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop{};
  BENCH_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s, %d SMs\n", prop.name, n_sms);
  cuda_ops::DeviceErrors* errors = nullptr;
  BENCH_CUDA_CHECK(cudaMallocHost(&errors, sizeof(cuda_ops::DeviceErrors)));
  std::memset(errors, 0, sizeof(*errors));
  bench::KernelJson json;
  try {
    if (wanted("prefill")) bench_prefill(errors, n_sms, json);
    if (wanted("decode")) bench_decode(errors, n_sms, json);
    if (wanted("depth")) bench_depth(errors, n_sms, json);
    if (wanted("mixed")) bench_mixed(errors, n_sms, json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
  BENCH_CUDA_CHECK(cudaDeviceSynchronize());
  if (errors->bits != 0) {
    std::fprintf(stderr, "attention_bench: device error bits %u (value %ld)\n", errors->bits, long(errors->value));
    return 1;
  }
  return json.write(json_path) ? 0 : 1;
}
