// The fast paged attention (tiles over GQA groups, SIMD scores / exp / P V) against the reference
// paged_attention_cpu (plain loops, std::exp) at every SIMD level this CPU supports. Several sequences in
// one AttentionMeta (prefill, chunked prefill after cached tokens, decode, one-token), blocks scattered
// over the cache, kv_len not a multiple of the block size. Tolerance: relative L2 <= 1e-5 over all output
// rows (fp32 throughout; the two differ only in summation order and exp, ~1e-7 each).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/attention.h"
#include "backends/cpu/vec_kernels.h"
#include "fixtures/numeric.h"
#include "fixtures/paged_layout.h"

namespace ferry {
namespace {

Tensor host(DType dt, std::initializer_list<int64_t> shape, void* data) { return Tensor::make(dt, shape, data); }

using test::random_floats;
using test::rel_l2;

struct Shape {
  int64_t n_heads, n_kv_heads, head_dim, block_size;
};

// seqs: (q_len, kv_len) per sequence. spread: standard deviation of q and k (larger: peakier softmax).
// window, softcap: AttentionMeta's sliding window and score soft-cap (0: off).
void check(const Shape& sh, const std::vector<std::pair<int32_t, int32_t>>& seqs, uint32_t seed, float spread,
           int32_t window = 0, float softcap = 0) {
  const int64_t H = sh.n_heads, KVH = sh.n_kv_heads, D = sh.head_dim, bs = sh.block_size;
  const test::PagedLayout L = test::make_paged_layout(bs, seqs, seed);
  const int32_t n_seqs = int32_t(seqs.size()), max_blocks = L.max_blocks, n_tokens = L.n_tokens;
  const int64_t n_blocks = L.n_blocks;
  const size_t cache_n = size_t(n_blocks * bs * KVH * D);
  std::vector<float> kc = random_floats(cache_n, seed + 1, spread), vc = random_floats(cache_n, seed + 2, 1.0f);
  std::vector<float> q = random_floats(size_t(n_tokens * H * D), seed + 3, spread);
  const float scale = 1.0f / std::sqrt(float(D));

  AttentionMeta meta;
  meta.n_seqs = n_seqs;
  meta.block_size = int32_t(bs);
  meta.max_blocks_per_seq = max_blocks;
  meta.host_q_start = L.q_start.data();
  meta.host_q_len = L.q_len.data();
  meta.host_kv_len = L.kv_len.data();
  meta.host_block_tables = L.tables.data();
  meta.window = window;
  meta.softcap = softcap;
  const Tensor tk = host(DType::F32, {n_blocks, bs, KVH, D}, kc.data());
  const Tensor tv = host(DType::F32, {n_blocks, bs, KVH, D}, vc.data());
  const Tensor tq = host(DType::F32, {n_tokens, H, D}, q.data());

  ThreadPool pool(2);
  std::vector<float> ref(q.size(), 0.0f);
  paged_attention_cpu(pool, host(DType::F32, {n_tokens, H, D}, ref.data()), tq, tk, tv, meta, scale);
  double worst = 0;
  for (SimdLevel level : supported_simd_levels()) {
    const VecKernels k = select_vec_kernels(level);
    std::vector<float> got(q.size(), std::nanf(""));  // every row must be written
    paged_attention_fast(pool, k, host(DType::F32, {n_tokens, H, D}, got.data()), tq, tk, tv, meta, scale);
    const double err = rel_l2(got, ref);
    EXPECT_LE(err, 1e-5) << simd_level_name(level) << " H " << H << " KVH " << KVH << " D " << D << " bs " << bs
                         << " spread " << spread << " window " << window << " softcap " << softcap;
    worst = std::max(worst, err);
  }
  std::printf("  H %ld KVH %ld D %ld bs %ld spread %.0f: worst rel L2 over levels %.2e\n", long(H), long(KVH), long(D),
              long(bs), double(spread), worst);
}

// (q_len, kv_len): a fresh prefill longer than one tile, a decode step deep in a sequence, a prefill chunk
// after cached tokens, a one-token sequence, a decode step exactly at a block boundary, a chunk of 2.
const std::vector<std::pair<int32_t, int32_t>> kMixed = {{45, 45}, {1, 200}, {9, 57}, {1, 1}, {1, 64}, {2, 35}};

TEST(CpuAttention, FastMatchesReferenceAcrossShapes) {
  uint32_t seed = 1;
  for (int64_t group : {1, 3, 4, 8})
    for (int64_t head_dim : {64, 128})
      for (int64_t block_size : {1, 16}) {
        const int64_t kv_heads = group == 8 ? 2 : 3;
        check({group * kv_heads, kv_heads, head_dim, block_size}, kMixed, seed++, 1.0f);
      }
}

TEST(CpuAttention, PeakySoftmaxAndLongPrefill) {
  // Large logits (running max changes across key blocks, most weights underflow) and a prefill much
  // longer than a key block.
  check({9, 3, 64, 16}, {{130, 130}, {1, 77}}, 101, 3.0f);
  check({32, 4, 128, 16}, {{70, 100}}, 102, 2.0f);
}

TEST(CpuAttention, GroupLargerThanATile) {
  // 40 query heads per KV head: the group splits over several tiles.
  check({40, 1, 64, 16}, {{5, 21}, {1, 33}}, 201, 1.0f);
}

TEST(CpuAttention, FastMatchesReferenceWithSlidingWindowAndSoftCap) {
  // Windows shorter than a tile's query span (rows of one tile start their windows in different key blocks; some
  // see no key of the first block), a window of 1 (each query sees only itself), longer than every sequence; with
  // and without Gemma 2's soft-cap (scores up to ~spread^2 * sqrt(D), so a cap of 2.5 bites).
  uint32_t seed = 401;
  for (int32_t window : {1, 5, 16, 40, 4096})
    for (float softcap : {0.0f, 2.5f}) {
      check({8, 2, 64, 16}, kMixed, seed++, 1.5f, window, softcap);
      check({4, 4, 32, 1}, {{70, 100}, {1, 9}}, seed++, 1.0f, window, softcap);
    }
  check({9, 3, 64, 16}, {{130, 130}, {1, 77}}, seed++, 3.0f, 50, 0.0f);
}

// The reference's window on its own: a window of 1 returns each query's own value row; a window as long as the
// sequence changes nothing; a window in between differs from full attention.
TEST(CpuAttention, ReferenceWindowSemantics) {
  const int64_t H = 2, KVH = 1, D = 16, bs = 4;
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{6, 10}, {1, 7}};
  const test::PagedLayout L = test::make_paged_layout(bs, seqs, 5);
  const size_t cache_n = size_t(L.n_blocks * bs * KVH * D);
  std::vector<float> kc = random_floats(cache_n, 6, 1.0f), vc = random_floats(cache_n, 7, 1.0f);
  std::vector<float> q = random_floats(size_t(L.n_tokens * H * D), 8, 1.0f);
  AttentionMeta meta;
  meta.n_seqs = int32_t(seqs.size());
  meta.block_size = int32_t(bs);
  meta.max_blocks_per_seq = L.max_blocks;
  meta.host_q_start = L.q_start.data();
  meta.host_q_len = L.q_len.data();
  meta.host_kv_len = L.kv_len.data();
  meta.host_block_tables = L.tables.data();
  const Tensor tk = host(DType::F32, {L.n_blocks, bs, KVH, D}, kc.data());
  const Tensor tv = host(DType::F32, {L.n_blocks, bs, KVH, D}, vc.data());
  const Tensor tq = host(DType::F32, {L.n_tokens, H, D}, q.data());
  ThreadPool pool(2);
  const auto run = [&](int32_t window) {
    std::vector<float> out(q.size(), std::nanf(""));
    meta.window = window;
    paged_attention_cpu(pool, host(DType::F32, {L.n_tokens, H, D}, out.data()), tq, tk, tv, meta, 0.25f);
    return out;
  };
  const std::vector<float> full = run(0), own = run(1), long_window = run(10), mid = run(3);
  EXPECT_EQ(long_window, full);
  EXPECT_GT(rel_l2(mid, full), 1e-2);
  for (int32_t row = 0; row < L.n_tokens; ++row)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d)
        EXPECT_FLOAT_EQ(own[size_t((row * H + h) * D + d)], vc[size_t(L.slots[size_t(row)] * KVH * D + d)]);
}

TEST(CpuAttention, UnsupportedHeadDimFallsBackToReference) {
  check({4, 2, 40, 16}, {{7, 19}}, 301, 1.0f);
}

}  // namespace
}  // namespace ferry
