// store_kv + paged causal GQA attention against the CPU reference, several sequences with different KV
// lengths in one step (prefill, chunked prefill and decode mixed), blocks scattered over the cache.
// Tolerance 1e-5 relative L2 (fp32 throughout; the CUDA kernel sums in a different order and uses exp2).
#ifdef FERRY_HAS_CUDA

#include <algorithm>
#include <numeric>

#include "cuda_test_util.h"

namespace ferry::test {
namespace {

struct Shape {
  int64_t n_heads, n_kv_heads, head_dim, block_size;
};

class CudaAttention : public CudaOpsTest {
 protected:
  // seqs: (q_len, kv_len) per sequence; the cache already holds (random) keys for positions < kv_len - q_len.
  void check(const Shape& sh, const std::vector<std::pair<int32_t, int32_t>>& seqs, uint32_t seed) {
    const int64_t H = sh.n_heads, KVH = sh.n_kv_heads, D = sh.head_dim, bs = sh.block_size;
    const int32_t n_seqs = int32_t(seqs.size());
    int32_t max_blocks = 0, n_tokens = 0;
    for (auto [ql, kl] : seqs) {
      max_blocks = std::max(max_blocks, int32_t((kl + bs - 1) / bs));
      n_tokens += ql;
    }
    const int64_t n_blocks = int64_t(max_blocks) * n_seqs + 3;
    // Scatter: sequence s gets blocks from a shuffled list; unused table entries are -1.
    std::vector<int32_t> perm(static_cast<size_t>(n_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    std::vector<int32_t> tables(size_t(n_seqs) * size_t(max_blocks), -1), q_start, q_len, kv_len;
    std::vector<int64_t> slots;
    size_t next = 0;
    int32_t row = 0;
    for (int32_t s = 0; s < n_seqs; ++s) {
      const auto [ql, kl] = seqs[size_t(s)];
      for (int32_t b = 0; b < (kl + bs - 1) / bs; ++b) tables[size_t(s * max_blocks + b)] = perm[next++];
      q_start.push_back(row);
      q_len.push_back(ql);
      kv_len.push_back(kl);
      for (int32_t i = 0; i < ql; ++i) {
        const int32_t pos = kl - ql + i;
        slots.push_back(int64_t(tables[size_t(s * max_blocks + pos / bs)]) * bs + pos % bs);
      }
      row += ql;
    }
    const int64_t cache_n = n_blocks * bs * KVH * D;
    std::vector<float> kc = random_floats(size_t(cache_n), seed + 1), vc = random_floats(size_t(cache_n), seed + 2);
    std::vector<float> k = random_floats(size_t(n_tokens * KVH * D), seed + 3);
    std::vector<float> v = random_floats(k.size(), seed + 4);
    std::vector<float> q = random_floats(size_t(n_tokens * H * D), seed + 5);
    const float scale = 1.0f / std::sqrt(float(D));

    const Tensor gkc = upload(DType::F32, {n_blocks, bs, KVH, D}, kc), gvc = upload(DType::F32, {n_blocks, bs, KVH, D}, vc);
    AttentionMeta gm;
    gm.n_seqs = n_seqs;
    gm.block_size = int32_t(bs);
    gm.max_blocks_per_seq = max_blocks;
    gm.q_start = upload(DType::I32, {n_seqs}, q_start);
    gm.q_len = upload(DType::I32, {n_seqs}, q_len);
    gm.kv_len = upload(DType::I32, {n_seqs}, kv_len);
    gm.block_tables = upload(DType::I32, {n_seqs, max_blocks}, tables);  // no host mirrors: the kernel must not need them
    gpu_->store_kv(gkc, gvc, upload(DType::F32, {n_tokens, KVH, D}, k), upload(DType::F32, {n_tokens, KVH, D}, v),
                   upload(DType::I64, {n_tokens}, slots));
    const Tensor out = poisoned({n_tokens, H, D});
    gpu_->attention(out, upload(DType::F32, {n_tokens, H, D}, q), gkc, gvc, gm, scale);

    AttentionMeta cm = gm;
    cm.q_start = host(DType::I32, {n_seqs}, q_start);
    cm.q_len = host(DType::I32, {n_seqs}, q_len);
    cm.kv_len = host(DType::I32, {n_seqs}, kv_len);
    cm.block_tables = host(DType::I32, {n_seqs, max_blocks}, tables);
    cm.host_q_start = q_start.data();
    cm.host_q_len = q_len.data();
    cm.host_kv_len = kv_len.data();
    cm.host_block_tables = tables.data();
    const Tensor ckc = host(DType::F32, {n_blocks, bs, KVH, D}, kc), cvc = host(DType::F32, {n_blocks, bs, KVH, D}, vc);
    cpu_.store_kv(ckc, cvc, host(DType::F32, {n_tokens, KVH, D}, k), host(DType::F32, {n_tokens, KVH, D}, v),
                  host(DType::I64, {n_tokens}, slots));
    std::vector<float> ref(q.size());
    cpu_.attention(host(DType::F32, {n_tokens, H, D}, ref), host(DType::F32, {n_tokens, H, D}, q), ckc, cvc, cm, scale);

    EXPECT_EQ(rel_l2(download(gkc), kc), 0.0) << "K cache after store_kv";
    EXPECT_EQ(rel_l2(download(gvc), vc), 0.0) << "V cache after store_kv";
    const double err = rel_l2(download(out), ref);
    EXPECT_LE(err, 1e-5) << "H " << H << " KVH " << KVH << " D " << D;
    std::printf("  H %ld KVH %ld D %ld bs %ld: rel L2 %.2e\n", long(H), long(KVH), long(D), long(bs), err);
  }
};

// (q_len, kv_len): a fresh prefill, a decode step deep in a sequence, a prefill chunk after cached tokens,
// a one-token sequence, a decode step exactly at a block boundary.
const std::vector<std::pair<int32_t, int32_t>> kMixed = {{13, 13}, {1, 200}, {9, 57}, {1, 1}, {1, 64}};

TEST_F(CudaAttention, GqaHeadDim128) { check({32, 8, 128, 16}, kMixed, 1); }
TEST_F(CudaAttention, GqaHeadDim64) { check({9, 3, 64, 16}, kMixed, 2); }
TEST_F(CudaAttention, MhaHeadDim64BlockSize32) { check({4, 4, 64, 32}, kMixed, 3); }
TEST_F(CudaAttention, SmallHeads16And32) {
  check({4, 2, 16, 16}, kMixed, 4);
  check({4, 2, 32, 8}, kMixed, 5);
}
TEST_F(CudaAttention, HeadDim96And256) {
  check({8, 2, 96, 16}, kMixed, 6);
  check({4, 1, 256, 16}, kMixed, 7);
}
TEST_F(CudaAttention, LongDecode) { check({32, 8, 128, 16}, {{1, 3000}, {2, 1500}}, 8); }

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
