// Sliding windows (AttentionMeta::window) and soft-capped scores (::softcap) on every CUDA attention kernel, against
// the CPU reference on fresh random inputs: the backend's dispatch (with host mirrors, and with device metadata only)
// and each kernel called directly (the simple kernel; the split-KV decode kernel on CUDA cores and on tensor cores,
// each with the batch-sized and the fixed-chunk plan; the mma.sync and the wgmma prefill kernels), each on the rows it
// writes. Blocks wholly behind every query's window are given back as the engine does (table entries -1): a kernel
// that read one would set kBadBlock, so every run must leave the device error word clear. The queries are scaled up
// (qscale) so that a soft-cap of a few units changes the softmax. Tolerances, relative L2, as attention_test.cpp sets
// them per kernel kind: fp32 kernels (simple, CUDA-core decode) 2e-5 (the reference's std::tanh against tanhf adds to
// the summation-order error), tensor-core decode (bf16 hi + lo splits of Q and P) 5e-5, tensor-core prefill (Q and P
// rounded to bf16) 2e-2.
#ifdef FERRY_HAS_CUDA

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "attention_test_util.h"
#include "backends/cuda/attention/decode_mma.cuh"
#include "backends/cuda/attention/decode_split.cuh"
#include "backends/cuda/attention/flash_prefill.cuh"
#include "backends/cuda/attention/flash_prefill_wgmma.cuh"
#include "cuda_test_util.h"
#include "fixtures/paged_layout.h"

namespace ferry::test {
namespace {

struct Shape {
  int64_t n_heads, n_kv_heads, head_dim, block_size;
};

struct Masking {
  int32_t window;  // 0: none
  float softcap;   // 0: none
};

constexpr double kFp32Tol = 2e-5, kMmaDecodeTol = 5e-5, kPrefillTol = 2e-2;

std::vector<float> bf16_round(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

class CudaAttentionWindow : public CudaOpsTest {
 protected:
  // seqs: (q_len, kv_len) per sequence; the cache holds random keys for every position below kv_len.
  void check(const Shape& sh, const std::vector<std::pair<int32_t, int32_t>>& seqs, Masking mk, float qscale,
             uint32_t seed) {
    const int64_t H = sh.n_heads, KVH = sh.n_kv_heads, D = sh.head_dim, bs = sh.block_size;
    PagedLayout L = make_paged_layout(bs, seqs, seed);
    const int32_t n_seqs = int32_t(seqs.size());
    // The blocks wholly before the first query's window go back to the pool (BlockManager::release_behind_window).
    int released = 0;
    for (int32_t s = 0; s < n_seqs && mk.window > 0; ++s) {
      const int64_t first_needed = std::max<int64_t>(0, int64_t(L.kv_len[size_t(s)]) - L.q_len[size_t(s)] - mk.window + 1);
      for (int64_t j = 0; (j + 1) * bs <= first_needed; ++j) {
        L.tables[size_t(s) * size_t(L.max_blocks) + size_t(j)] = -1;
        ++released;
      }
    }
    const int64_t cache_n = L.n_blocks * bs * KVH * D;
    std::vector<float> kc = bf16_round(random_floats(size_t(cache_n), seed + 1));  // (n_blocks, bs, KVH, D)
    std::vector<float> vc = bf16_round(random_floats(size_t(cache_n), seed + 2));
    std::vector<float> q = random_floats(size_t(L.n_tokens * H * D), seed + 3);  // (n_tokens, H, D)
    for (float& x : q) x *= qscale;
    const float scale = 1.0f / std::sqrt(float(D));
    const std::string what = "H " + std::to_string(H) + " KVH " + std::to_string(KVH) + " D " + std::to_string(D) +
                             " bs " + std::to_string(bs) + ", window " + std::to_string(mk.window) + ", softcap " +
                             std::to_string(mk.softcap);

    AttentionMeta cm = host_attention_meta(L, int32_t(bs));
    cm.window = mk.window;
    cm.softcap = mk.softcap;
    std::vector<float> ref(q.size());
    cpu_.attention(host(DType::F32, {L.n_tokens, H, D}, ref), host(DType::F32, {L.n_tokens, H, D}, q),
                   host(DType::F32, {L.n_blocks, bs, KVH, D}, kc), host(DType::F32, {L.n_blocks, bs, KVH, D}, vc), cm,
                   scale);
    // Without the window and the cap the reference must differ, or the case proves nothing.
    {
      PagedLayout F = make_paged_layout(bs, seqs, seed);  // every block in place
      AttentionMeta fm = host_attention_meta(F, int32_t(bs));
      std::vector<float> plain(q.size());
      cpu_.attention(host(DType::F32, {L.n_tokens, H, D}, plain), host(DType::F32, {L.n_tokens, H, D}, q),
                     host(DType::F32, {L.n_blocks, bs, KVH, D}, kc), host(DType::F32, {L.n_blocks, bs, KVH, D}, vc),
                     fm, scale);
      EXPECT_GT(rel_l2(plain, ref), 1e-3) << what << ": the window / cap changes nothing here";
    }

    const Tensor gkc = upload(DType::BF16, {L.n_blocks, bs, KVH, D}, to_bf16_bits(kc));
    const Tensor gvc = upload(DType::BF16, {L.n_blocks, bs, KVH, D}, to_bf16_bits(vc));
    const Tensor gq = upload(DType::F32, {L.n_tokens, H, D}, q);
    AttentionMeta gm;
    gm.n_seqs = n_seqs;
    gm.block_size = int32_t(bs);
    gm.max_blocks_per_seq = L.max_blocks;
    gm.q_start = upload(DType::I32, {n_seqs}, L.q_start);
    gm.q_len = upload(DType::I32, {n_seqs}, L.q_len);
    gm.kv_len = upload(DType::I32, {n_seqs}, L.kv_len);
    gm.block_tables = upload(DType::I32, {n_seqs, L.max_blocks}, L.tables);
    gm.window = mk.window;
    gm.softcap = mk.softcap;

    const size_t row_floats = size_t(H * D);
    // The rows of the sequences whose q_len passes `want` (1: decode rows, 2: prompt rows, 0: all).
    const auto rows_of = [&](const std::vector<float>& all, int want) {
      std::vector<float> r;
      for (int32_t s = 0; s < n_seqs; ++s) {
        const int32_t ql = L.q_len[size_t(s)];
        if (want == 1 ? ql != 1 : want == 2 ? ql < 2 : false) continue;
        const size_t b = size_t(L.q_start[size_t(s)]) * row_floats;
        r.insert(r.end(), all.begin() + long(b), all.begin() + long(b + size_t(ql) * row_floats));
      }
      return r;
    };
    const bool has_decode = !rows_of(ref, 1).empty(), has_prompt = !rows_of(ref, 2).empty();
    const auto report = [&](const char* name, const std::vector<float>& got, int rows, double tol) {
      const std::vector<float> g = rows_of(got, rows), r = rows_of(ref, rows);
      size_t bad = 0;
      for (const float x : g) bad += std::isfinite(x) ? 0 : 1;
      EXPECT_EQ(bad, 0u) << what << ", " << name << ": rows not written";
      const double err = rel_l2(g, r);
      EXPECT_LE(err, tol) << what << ", " << name;
      std::printf("  %s, %-34s rel L2 %.2e\n", what.c_str(), name, err);
    };

    // 1. The backend's dispatch, with host mirrors (the host knows the step's kind) and without.
    for (const bool mirrors : {true, false}) {
      AttentionMeta m = gm;
      if (mirrors) {
        m.host_q_start = L.q_start.data();
        m.host_q_len = L.q_len.data();
        m.host_kv_len = L.kv_len.data();
        m.host_block_tables = L.tables.data();
      }
      const Tensor out = poisoned({L.n_tokens, H, D});
      gpu_->attention(out, gq, gkc, gvc, m, scale);
      gpu_->synchronize();  // throws on a device error (a read of a given-back block sets kBadBlock)
      const double tol = has_prompt && cuda_ops::flash_prefill_supports(int(D)) ? kPrefillTol
                         : cuda_ops::decode_mma_supports(int(D))                   ? kMmaDecodeTol
                                                                                   : kFp32Tol;
      report(mirrors ? "attention() with host mirrors" : "attention() device metadata", download(out), 0, tol);
    }

    // 2. Each kernel directly, with its own error word and zeroed scratch.
    constexpr int64_t kErrWords = int64_t((sizeof(cuda_ops::DeviceErrors) + 3) / 4);
    const auto run = [&](const char* name, auto&& launch, size_t scratch_bytes) {
      cuda_ops::AttentionParams p =
          attention_params({gq, gkc, gvc, gm.q_start, gm.q_len, gm.kv_len, gm.block_tables, scale});
      p.window = mk.window;
      p.softcap = mk.softcap;
      const Tensor out = poisoned({L.n_tokens, H, D});
      const Tensor errs = upload(DType::I32, {kErrWords}, std::vector<int32_t>(size_t(kErrWords), 0));
      const int64_t words = int64_t(std::max<size_t>(4, (scratch_bytes + 3) / 4));
      const Tensor scratch = upload(DType::I32, {words}, std::vector<int32_t>(size_t(words), 0));
      p.out = out.ptr<float>();
      p.errors = errs.ptr<cuda_ops::DeviceErrors>();
      p.scratch = scratch.ptr<float>();
      p.scratch_bytes = size_t(words) * 4;
      launch(p);
      cuda_ops::DeviceErrors e{};
      gpu_->copy_to_host(&e, errs, sizeof(e));
      EXPECT_EQ(e.bits, 0u) << what << ", " << name << ": device error value " << e.value;
      return download(out);
    };
    cudaStream_t stream = gpu_->stream();
    report("simple kernel", run("simple", [&](auto& p) { cuda_ops::attention_simple(p, stream); }, 0), 0, kFp32Tol);
    int dev = 0, n_sms = 0;
    ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
    ASSERT_EQ(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
    if (has_decode && cuda_ops::decode_split_supports(int(D))) {
      using cuda_ops::DecodeKernel;
      for (const DecodeKernel kernel : {DecodeKernel::kCudaCores, DecodeKernel::kTensorCores}) {
        const bool tc = kernel == DecodeKernel::kTensorCores;
        if (tc && !cuda_ops::decode_mma_supports(int(D))) continue;
        for (const bool fixed : {false, true}) {
          cuda_ops::AttentionParams hp =
              attention_params({gq, gkc, gvc, gm.q_start, gm.q_len, gm.kv_len, gm.block_tables, scale});
          hp.window = mk.window;
          hp.batch_invariant = fixed;
          const cuda_ops::DecodeSplitPlan plan = cuda_ops::plan_decode_split(hp, n_sms, kernel);
          const std::string name = std::string(tc ? "tensor" : "CUDA") + "-core decode, " + (fixed ? "fixed" : "batch") +
                                   " plan (" + std::to_string(plan.n_splits) + "x" + std::to_string(plan.chunk) + ")";
          const std::vector<float> got = run(
              name.c_str(),
              [&](auto& p) {
                p.batch_invariant = fixed;
                cuda_ops::decode_split_attention(p, plan, stream);
              },
              cuda_ops::decode_split_scratch_bytes(hp, plan));
          report(name.c_str(), got, 1, tc ? kMmaDecodeTol : kFp32Tol);
        }
      }
    }
    if (has_prompt && cuda_ops::flash_prefill_supports(int(D))) {
      report("mma.sync prefill kernel", run("mma.sync", [&](auto& p) { cuda_ops::flash_prefill_attention(p, stream); }, 0),
             2, kPrefillTol);
    }
    if (has_prompt && cuda_ops::flash_prefill_wgmma_supports(int(D)) && hopper_sm_count() > 0) {
      report("wgmma prefill kernel",
             run("wgmma", [&](auto& p) { cuda_ops::flash_prefill_wgmma_attention(p, stream); }, 0), 2, kPrefillTol);
    }
    if (mk.window > 0) std::printf("  (%d blocks given back before the step)\n", released);
  }
};

// Decode rows deep in a sequence and near its start, a prompt chunk after cached tokens whose window starts inside
// its first key tile, a fresh prompt longer than the window, a one-token sequence, a prompt of 2 rows.
const std::vector<std::pair<int32_t, int32_t>> kSteps = {{1, 300}, {1, 40}, {70, 70}, {37, 400}, {1, 1}, {130, 1000},
                                                         {2, 260}};

TEST_F(CudaAttentionWindow, WindowHeadDim128) { check({32, 8, 128, 16}, kSteps, {64, 0}, 1, 300); }
TEST_F(CudaAttentionWindow, SoftcapHeadDim128) { check({32, 8, 128, 16}, kSteps, {0, 5}, 4, 301); }
TEST_F(CudaAttentionWindow, WindowAndSoftcapHeadDim128) { check({32, 8, 128, 16}, kSteps, {100, 10}, 4, 302); }
TEST_F(CudaAttentionWindow, WindowHeadDim64BlockSize8) { check({16, 2, 64, 8}, kSteps, {37, 3}, 4, 303); }
// Gemma's head_dim (the mma.sync prefill kernel's 64-row tiles, CUDA cores for decode) and Phi-3's (the simple
// kernel).
TEST_F(CudaAttentionWindow, WindowAndSoftcapHeadDim256) { check({8, 4, 256, 16}, kSteps, {50, 3}, 4, 304); }
TEST_F(CudaAttentionWindow, WindowHeadDim96) { check({8, 2, 96, 16}, kSteps, {33, 0}, 1, 305); }
// Block sizes that are not multiples of 16 (the decode kernels' per-row lookups), a window of one position (each
// query sees itself only), a window of 2.
TEST_F(CudaAttentionWindow, BlockSize24AndTinyWindows) {
  check({8, 8, 128, 24}, kSteps, {1, 0}, 1, 306);
  check({16, 4, 64, 16}, kSteps, {2, 0}, 1, 307);
}
// A window longer than the first sequences (no effect on them) and a decode row 5000 deep with a 4096 window: the
// decode plan's chunks cover the window, not the context.
TEST_F(CudaAttentionWindow, DecodeDeepInALongSequence) {
  check({32, 8, 128, 16}, {{1, 5000}, {1, 100}, {1, 4097}}, {4096, 0}, 1, 308);
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
