// CudaBackend::qkv_attention at a decode step (the q/k/v epilogue inside the tensor-core decode kernel,
// decode_fused_qkv.cuh) against the two ops it replaces, qkv_epilogue then attention, on the same inputs:
// the attention output and both caches must be equal bit for bit (the fused code does the epilogue's arithmetic
// in the same order), and the q buffer must stay untouched (which also proves the fused path ran: the two ops
// write it). Cases: head_dim 128 and 64, GQA 4, 1 and 6, both RoPE orderings, with and without q/k norm,
// contexts 1 (the token alone), 17, 300 and 3000 (several splits: the step's token in the last one), block size
// 16 with shuffled blocks, the new token's cache slot holding stale values before the step.
#ifdef FERRY_HAS_CUDA

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "formats/quant.h"

namespace ferry::test {
namespace {

struct Case {
  int64_t head_dim, n_heads, n_kv_heads;
  RopeOrdering ordering;
  bool qk_norm;
};

class CudaQkvAttention : public CudaOpsTest {
 protected:
  void run(const Case& c) {
    const int64_t D = c.head_dim, H = c.n_heads, KVH = c.n_kv_heads, n_all = H + 2 * KVH, bs = 16;
    const std::vector<int32_t> kv_len = {1, 17, 300, 3000};
    const auto n = int64_t(kv_len.size());
    const std::string what = "D " + std::to_string(D) + " H " + std::to_string(H) + " KVH " + std::to_string(KVH) +
                             (c.ordering == RopeOrdering::Neox ? " neox" : " interleaved") + (c.qk_norm ? " qk_norm" : "");
    // Block tables over a shuffled pool; sequence s's blocks are consecutive entries of the shuffled ids.
    int32_t max_blocks = 0, total_blocks = 0;
    for (int32_t kv : kv_len) {
      max_blocks = std::max(max_blocks, (kv + int32_t(bs) - 1) / int32_t(bs));
      total_blocks += (kv + int32_t(bs) - 1) / int32_t(bs);
    }
    const int64_t n_blocks = total_blocks + 3;
    std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(uint32_t(D + H)));
    const auto un = static_cast<size_t>(n);
    std::vector<int32_t> tables(un * size_t(max_blocks), -1), q_start(un), q_len(un, 1), pos(un);
    std::vector<int64_t> slots(un);
    size_t next = 0;
    for (int64_t s = 0; s < n; ++s) {
      const int32_t kv = kv_len[size_t(s)];
      for (int32_t b = 0; b < (kv + int32_t(bs) - 1) / int32_t(bs); ++b) tables[size_t(s * max_blocks + b)] = ids[next++];
      q_start[size_t(s)] = int32_t(s);
      pos[size_t(s)] = kv - 1;
      slots[size_t(s)] = int64_t(tables[size_t(s * max_blocks + (kv - 1) / bs)]) * bs + (kv - 1) % bs;
    }
    const size_t cache_n = size_t(n_blocks * bs * KVH * D);
    std::vector<uint16_t> cache_init(cache_n);
    const std::vector<float> cache_f = random_floats(cache_n, 21 + uint32_t(D), 1.5f);
    quantize_row(DType::BF16, cache_f.data(), cache_init.data(), int64_t(cache_n));
    const std::vector<float> qkv = random_floats(size_t(n * n_all * D), 22 + uint32_t(H), 2.0f);
    std::vector<float> inv(size_t(D / 2));
    for (int64_t i = 0; i < D / 2; ++i) inv[size_t(i)] = float(std::pow(500000.0, -2.0 * double(i) / double(D)));
    std::vector<float> qn = random_floats(size_t(D), 23, 0.5f), kn = random_floats(size_t(D), 24, 0.5f);
    for (float& x : qn) x += 1.0f;
    for (float& x : kn) x += 1.0f;

    AttentionMeta meta;
    meta.n_seqs = int32_t(n);
    meta.block_size = int32_t(bs);
    meta.max_blocks_per_seq = max_blocks;
    meta.q_start = upload(DType::I32, {n}, q_start);
    meta.q_len = upload(DType::I32, {n}, q_len);
    meta.kv_len = upload(DType::I32, {n}, kv_len);
    meta.block_tables = upload(DType::I32, {n, max_blocks}, tables);
    const Tensor g_qkv = upload(DType::F32, {n, n_all, D}, qkv), g_pos = upload(DType::I32, {n}, pos);
    const Tensor g_slots = upload(DType::I64, {n}, slots), g_inv = upload(DType::F32, {D / 2}, inv);
    const Tensor g_qn = upload(DType::F32, {D}, qn), g_kn = upload(DType::F32, {D}, kn);
    const float scale = 1.0f / std::sqrt(float(D));

    std::vector<float> out[2];
    std::vector<uint16_t> kc[2], vc[2];
    for (int fused = 0; fused < 2; ++fused) {
      const Tensor k_cache = upload(DType::BF16, {n_blocks, bs, KVH, D}, cache_init);
      const Tensor v_cache = upload(DType::BF16, {n_blocks, bs, KVH, D}, cache_init);
      const Tensor q = poisoned({n, H, D}), o = poisoned({n, H, D});
      const QkvEpilogueArgs e{.qkv = g_qkv, .positions = g_pos, .slots = g_slots, .inv_freq = g_inv,
                              .q_norm = c.qk_norm ? g_qn : Tensor{}, .k_norm = c.qk_norm ? g_kn : Tensor{},
                              .eps = 1e-6f, .ordering = c.ordering, .q = q, .k_cache = k_cache, .v_cache = v_cache};
      if (fused) {
        AttentionMeta m = meta;
        m.decode_only = true;
        gpu_->qkv_attention(e, o, m, scale);
        const std::vector<float> q_after = download(q);
        EXPECT_TRUE(std::all_of(q_after.begin(), q_after.end(), [](float x) { return std::isnan(x); }))
            << what << ": q was written, so the fused path did not run";
      } else {
        gpu_->qkv_epilogue(e);
        gpu_->attention(o, q, k_cache, v_cache, meta, scale);
      }
      out[fused] = download(o);
      kc[fused].resize(cache_n);
      vc[fused].resize(cache_n);
      gpu_->copy_to_host(kc[fused].data(), k_cache, cache_n * 2);
      gpu_->copy_to_host(vc[fused].data(), v_cache, cache_n * 2);
    }
    EXPECT_EQ(out[0], out[1]) << what << ": attention output";
    EXPECT_EQ(kc[0], kc[1]) << what << ": K cache";
    EXPECT_EQ(vc[0], vc[1]) << what << ": V cache";
    EXPECT_FALSE(std::any_of(out[1].begin(), out[1].end(), [](float x) { return std::isnan(x); })) << what;
  }
};

TEST_F(CudaQkvAttention, FusedDecodeEqualsEpilogueThenAttention) {
  for (const RopeOrdering o : {RopeOrdering::Interleaved, RopeOrdering::Neox}) {
    for (const bool norm : {false, true}) {
      run({128, 32, 8, o, norm});
      run({64, 12, 2, o, norm});
    }
  }
  run({128, 4, 4, RopeOrdering::Neox, false});
}

// A step that is not decode-only, or that asks for the k/v copies (a debug observer), takes the two ops: q is
// written then.
TEST_F(CudaQkvAttention, ObserverCopiesTakeTheTwoOps) {
  const int64_t D = 64, H = 4, KVH = 2, n_all = H + 2 * KVH, bs = 16;
  const std::vector<int32_t> one = {1}, zero = {0}, table = {0};
  const std::vector<int64_t> slot = {0};
  const std::vector<float> qkv = random_floats(size_t(n_all * D), 31), inv(size_t(D / 2), 0.25f);
  AttentionMeta meta;
  meta.n_seqs = 1;
  meta.block_size = int32_t(bs);
  meta.max_blocks_per_seq = 1;
  meta.q_start = upload(DType::I32, {1}, zero);
  meta.q_len = upload(DType::I32, {1}, one);
  meta.kv_len = upload(DType::I32, {1}, one);
  meta.block_tables = upload(DType::I32, {1, 1}, table);
  meta.decode_only = true;
  const Tensor q = poisoned({1, H, D}), o = poisoned({1, H, D});
  gpu_->qkv_attention({.qkv = upload(DType::F32, {1, n_all, D}, qkv), .positions = upload(DType::I32, {1}, zero),
                       .slots = upload(DType::I64, {1}, slot), .inv_freq = upload(DType::F32, {D / 2}, inv),
                       .ordering = RopeOrdering::Neox, .q = q, .k_cache = upload(DType::BF16, {1, bs, KVH, D}, nullptr),
                       .v_cache = upload(DType::BF16, {1, bs, KVH, D}, nullptr), .k_out = poisoned({1, KVH, D}),
                       .v_out = poisoned({1, KVH, D})},
                      o, meta, 0.125f);
  const std::vector<float> q_after = download(q);
  EXPECT_FALSE(std::any_of(q_after.begin(), q_after.end(), [](float x) { return std::isnan(x); }));
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
