// Key splits of the one-launch mixed attention (mixed_attention.cuh, MixedAttentionConfig::key_splits): a prompt
// tile's keys walked by up to K blocks whose partials (o, m, l) the last block merges.
// Host tests (run anywhere): the split ranges and the proposed rule's bounds.
// Device tests (skip without a GPU), each configuration run twice on the same scratch:
//  - against the CPU reference (f32 on the same bf16-rounded K/V): prefill rows within 2e-2 relative L2, the
//    bound attention_test.cpp uses for the unsplit tensor-core prefill (an emulation of the tile arithmetic, bf16 Q
//    and P with fp32 state, predicts ~2.2e-3 split or not);
//  - against the same configuration with key_splits = 1: prefill rows of tiles that split within 4e-3 (the
//    emulation predicts 0.9-1.6e-3: each split rounds P to bf16 against its own running max), rows of tiles that
//    do not split (fewer than 2 x min_split_key_tiles key tiles) and every decode row bit-identical;
//  - the repeated call bit-identical, every output finite, no device error, and the arrival counters (the decode
//    plan's, the ticket, the splits') all back at zero.
// Steps: prompts on an empty prefix, on 512- and 1500-token prefixes, several prompts in one step, decode rows
// beside them; 64- and 128-row tiles, 1 and 2 prefill slots per SM, K = 2 and 4, min_split_key_tiles 1 and 2.
#ifdef FERRY_HAS_CUDA

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "attention_test_util.h"
#include "backends/cuda/attention/decode_split.cuh"
#include "backends/cuda/attention/mixed_attention.cuh"
#include "cuda_test_util.h"
#include "fixtures/paged_layout.h"

namespace ferry::test {
namespace {

using Seqs = std::vector<std::pair<int32_t, int32_t>>;  // (q_len, kv_len) per sequence

// The ranges of key_split_begin cover [0, n_k) in order, u = key_split_count is within [1, K], every range of a
// split tile holds at least min_tiles key tiles, sizes differ by at most one, and u = 1 exactly when no split of
// min_tiles tiles is possible (n_k < 2 min_tiles) or K = 1.
TEST(MixedKeySplits, RangesCoverTheKeysInOrder) {
  for (int k = 1; k <= cuda_ops::kMaxKeySplits; ++k) {
    for (int min_tiles = 1; min_tiles <= 3; ++min_tiles) {
      for (int n_k = 1; n_k <= 300; ++n_k) {
        const int u = cuda_ops::key_split_count(n_k, k, min_tiles);
        ASSERT_GE(u, 1);
        ASSERT_LE(u, k);
        EXPECT_EQ(u == 1, k == 1 || n_k < 2 * min_tiles) << "n_k " << n_k << " K " << k << " min " << min_tiles;
        EXPECT_EQ(cuda_ops::key_split_begin(n_k, u, 0), 0);
        EXPECT_EQ(cuda_ops::key_split_begin(n_k, u, u), n_k);
        int lo = n_k, hi = 0;
        for (int j = 0; j < u; ++j) {
          const int len = cuda_ops::key_split_begin(n_k, u, j + 1) - cuda_ops::key_split_begin(n_k, u, j);
          lo = std::min(lo, len);
          hi = std::max(hi, len);
        }
        EXPECT_LE(hi - lo, 1) << "n_k " << n_k << " u " << u;
        if (u > 1) {
          EXPECT_GE(lo, min_tiles) << "n_k " << n_k << " u " << u;
        }
      }
    }
  }
}

cuda_ops::AttentionParams host_params(int32_t n_seqs, int32_t n_tokens, int32_t max_blocks, int32_t n_heads,
                                      int32_t n_kv_heads, int32_t head_dim) {
  return cuda_ops::AttentionParams{.out = nullptr, .q = nullptr, .k_cache = nullptr, .v_cache = nullptr,
                                   .q_start = nullptr, .q_len = nullptr, .kv_len = nullptr, .block_tables = nullptr,
                                   .n_seqs = n_seqs, .max_blocks_per_seq = max_blocks, .block_size = 16,
                                   .n_blocks = max_blocks * n_seqs, .n_tokens = n_tokens, .n_heads = n_heads,
                                   .n_kv_heads = n_kv_heads, .head_dim = head_dim, .scale = 0.088f, .errors = nullptr};
}

// The proposed rule (mixed_key_splits, host sizes only): 1 for decode-only steps and for steps whose tiles fill
// a wave of 2 slots per SM; whatever it returns fits the counters and the scratch cap; it never splits more as the
// step grows; it splits a mixed step of Llama-3-8B's shape (460 prompt + 50 decode rows).
TEST(MixedKeySplits, RuleBounds) {
  const int n_sms = 132;
  for (const int32_t rows : {64, 128}) {
    for (const int32_t n_seqs : {1, 2, 8, 50, 64}) {
      int prev = cuda_ops::kMaxKeySplits;
      for (int32_t n_tokens = n_seqs; n_tokens <= 32768; n_tokens *= 2) {
        cuda_ops::AttentionParams p = host_params(n_seqs, n_tokens, 256, 32, 8, 128);  // contexts up to 4096
        const cuda_ops::DecodeSplitPlan plan = cuda_ops::plan_decode_split(p, n_sms);
        const int k = cuda_ops::mixed_key_splits(p, plan, rows, n_sms);
        ASSERT_GE(k, 1);
        ASSERT_LE(k, cuda_ops::kMaxKeySplits);
        if (n_tokens == n_seqs) {
          EXPECT_EQ(k, 1) << "as many rows as sequences: a decode step";
        } else {
          EXPECT_LE(k, prev) << n_tokens << " tokens, " << n_seqs << " seqs";
          prev = k;
        }
        const cuda_ops::MixedAttentionConfig c{.tile_rows = rows, .key_splits = k};
        EXPECT_TRUE(cuda_ops::mixed_key_splits_fit(p, plan, c));
        const size_t extra = cuda_ops::mixed_attention_scratch_bytes(p, plan, c) -
                             cuda_ops::decode_split_scratch_bytes(p, plan);
        EXPECT_LE(extra, (size_t(64) << 20) + 256) << n_tokens << " tokens";
        if ((int64_t(n_tokens) + rows - 1) / rows * 32 >= 2 * n_sms) {
          EXPECT_EQ(k, 1) << n_tokens << " tokens fill a wave";
        }
        p.max_q_len = 1;
        EXPECT_EQ(cuda_ops::mixed_key_splits(p, plan, rows, n_sms), 1) << "decode-only by the host mirror";
      }
    }
  }
  {
    const cuda_ops::AttentionParams p = host_params(51, 510, 61, 32, 8, 128);  // contexts up to 976
    EXPECT_GT(cuda_ops::mixed_key_splits(p, cuda_ops::plan_decode_split(p, n_sms), 64, n_sms), 1);
  }
  // No tile can span 2 x min_split_key_tiles key tiles: contexts up to 192 positions.
  const cuda_ops::AttentionParams p = host_params(2, 200, 12, 32, 8, 128);
  EXPECT_EQ(cuda_ops::mixed_key_splits(p, cuda_ops::plan_decode_split(p, n_sms), 64, n_sms), 1);
}

// Whether query row i of sequence s lies in a tile that splits (u >= 2), mirroring the kernel's tile geometry:
// tiles of `rows` query rows, the sequence's last rows first; a tile needs keys [0, kv_len - q_len + its end).
std::vector<bool> split_rows(const PagedLayout& L, int rows, int key_splits, int min_tiles) {
  std::vector<bool> split(size_t(L.n_tokens), false);
  for (size_t s = 0; s < L.q_len.size(); ++s) {
    const int ql = L.q_len[s], kl = L.kv_len[s];
    if (ql < 2) continue;
    for (int i0 = 0; i0 < ql; i0 += rows) {
      const int k_end = kl - ql + std::min(i0 + rows, ql);
      const int u = cuda_ops::key_split_count((k_end + 63) / 64, key_splits, min_tiles);
      for (int i = i0; i < std::min(i0 + rows, ql); ++i) split[size_t(L.q_start[s] + i)] = u > 1;
    }
  }
  return split;
}

class CudaMixedSplit : public CudaOpsTest {
 protected:
  // One step: random bf16 K/V written straight into a scattered paged cache, random q; every configuration of
  // the sweep against key_splits = 1 of the same tiles and slots and, with cpu_ref, the CPU reference.
  void run(int64_t H, int64_t KVH, int64_t D, const Seqs& seqs, uint32_t seed, bool cpu_ref) {
    const int64_t bs = 16;
    PagedLayout L = make_paged_layout(bs, seqs, seed);
    const int64_t cache_n = L.n_blocks * bs * KVH * D;
    const std::vector<float> kc = random_floats(size_t(cache_n), seed + 1), vc = random_floats(size_t(cache_n), seed + 2);
    const std::vector<float> q = random_floats(size_t(L.n_tokens * H * D), seed + 3);
    const Tensor gkc = upload(DType::BF16, {L.n_blocks, bs, KVH, D}, to_bf16_bits(kc));
    const Tensor gvc = upload(DType::BF16, {L.n_blocks, bs, KVH, D}, to_bf16_bits(vc));
    const Tensor gq = upload(DType::F32, {L.n_tokens, H, D}, q);
    const int32_t n_seqs = int32_t(seqs.size());
    const Tensor q_start = upload(DType::I32, {n_seqs}, L.q_start), q_len = upload(DType::I32, {n_seqs}, L.q_len);
    const Tensor kv_len = upload(DType::I32, {n_seqs}, L.kv_len);
    const Tensor tables = upload(DType::I32, {n_seqs, L.max_blocks}, L.tables);
    constexpr int64_t kErrWords = int64_t((sizeof(cuda_ops::DeviceErrors) + 3) / 4);
    const Tensor errs = upload(DType::I32, {kErrWords}, std::vector<int32_t>(size_t(kErrWords), 0));
    cuda_ops::AttentionParams p =
        attention_params({gq, gkc, gvc, q_start, q_len, kv_len, tables, 1.0f / std::sqrt(float(D))});
    p.errors = errs.ptr<cuda_ops::DeviceErrors>();
    const cuda_ops::DecodeSplitPlan plan = cuda_ops::plan_decode_split(p, 132);
    ASSERT_TRUE(cuda_ops::mixed_attention_supports(p, plan));
    p.scratch_bytes = cuda_ops::mixed_attention_scratch_bytes(p, plan, {.key_splits = cuda_ops::kMaxKeySplits});
    const int64_t scratch_words = int64_t((p.scratch_bytes + 3) / 4);
    const Tensor scratch = upload(DType::I32, {scratch_words}, std::vector<int32_t>(size_t(scratch_words), 0));
    p.scratch = scratch.ptr<float>();
    const int64_t n_out = int64_t(L.n_tokens) * H * D;
    const size_t row_floats = size_t(H * D);
    cudaStream_t stream = gpu_->stream();

    std::vector<float> ref;
    if (cpu_ref) {
      std::vector<float> kc_r(kc.size()), vc_r(vc.size());
      for (size_t i = 0; i < kc.size(); ++i) kc_r[i] = bf16_to_f32(f32_to_bf16(kc[i]));
      for (size_t i = 0; i < vc.size(); ++i) vc_r[i] = bf16_to_f32(f32_to_bf16(vc[i]));
      std::vector<float> q_h = q;
      const AttentionMeta cm = test::host_attention_meta(L, int32_t(bs));
      ref.assign(q.size(), 0.0f);
      cpu_.attention(host(DType::F32, {L.n_tokens, H, D}, ref), host(DType::F32, {L.n_tokens, H, D}, q_h),
                     host(DType::F32, {L.n_blocks, bs, KVH, D}, kc_r), host(DType::F32, {L.n_blocks, bs, KVH, D}, vc_r),
                     cm, p.scale);
    }

    // Rows of `all` whose sequence has q_len >= 2 (prefill) or == 1 (decode), and among prefill rows those whose
    // tile splits or not (mask: split_rows).
    const auto pick = [&](const std::vector<float>& all, int kind, const std::vector<bool>* split) {
      std::vector<float> r;
      for (size_t s = 0; s < seqs.size(); ++s) {
        const int ql = L.q_len[s];
        if (ql == 0 || (ql == 1) != (kind == 0)) continue;
        for (int i = 0; i < ql; ++i) {
          const size_t row = size_t(L.q_start[s] + i);
          if (split != nullptr && (*split)[row] != (kind == 1)) continue;
          r.insert(r.end(), all.begin() + long(row * row_floats), all.begin() + long((row + 1) * row_floats));
        }
      }
      return r;
    };
    const auto counters_zero = [&] {
      std::vector<int32_t> c(cuda_ops::DecodeSplitLimits::kMaxCounters);
      gpu_->copy_to_host(c.data(), scratch, c.size() * 4);
      return std::all_of(c.begin(), c.end(), [](int32_t x) { return x == 0; });
    };
    // Twice on the same scratch: the two results must agree bit for bit.
    const auto run_config = [&](const cuda_ops::MixedAttentionConfig& cfg, const std::string& what) {
      const Tensor out = poisoned({n_out});
      p.out = out.ptr<float>();
      cuda_ops::mixed_attention(p, plan, stream, cfg);
      const std::vector<float> first = download(out);
      cuda_ops::mixed_attention(p, plan, stream, cfg);
      const std::vector<float> second = download(out);
      EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * 4), 0) << what << ": a repeated call differs";
      EXPECT_TRUE(counters_zero()) << what << ": an arrival counter was left non-zero";
      size_t bad = 0;
      for (const float x : pick(first, 0, nullptr)) bad += std::isfinite(x) ? 0 : 1;
      for (const float x : pick(first, 2, nullptr)) bad += std::isfinite(x) ? 0 : 1;
      EXPECT_EQ(bad, 0u) << what << ": rows not written or not finite";
      return first;
    };

    const std::string shape = "H " + std::to_string(H) + " KVH " + std::to_string(KVH) + " D " + std::to_string(D) +
                              ", " + std::to_string(seqs.size()) + " seqs";
    for (const auto& [rows, slots] : {std::pair<int, int>{64, 1}, {64, 2}, {128, 2}}) {
      const cuda_ops::MixedAttentionConfig base_cfg{.tile_rows = rows, .slots_per_sm = slots};
      const std::vector<float> base = run_config(base_cfg, shape + ", K 1");
      for (const int k : {2, 4}) {
        for (const int min_tiles : {1, 2}) {
          const cuda_ops::MixedAttentionConfig cfg{.tile_rows = rows, .slots_per_sm = slots, .key_splits = k,
                                                   .min_split_key_tiles = min_tiles};
          ASSERT_TRUE(cuda_ops::mixed_key_splits_fit(p, plan, cfg));
          const std::string what = shape + ", rows " + std::to_string(rows) + " slots " + std::to_string(slots) +
                                   " K " + std::to_string(k) + " min " + std::to_string(min_tiles);
          const std::vector<float> got = run_config(cfg, what);
          const std::vector<bool> split = split_rows(L, rows, k, min_tiles);
          // Decode rows and the rows of unsplit tiles: the K = 1 kernel's bits.
          const std::vector<float> dec = pick(got, 0, nullptr), base_dec = pick(base, 0, nullptr);
          EXPECT_EQ(std::memcmp(dec.data(), base_dec.data(), dec.size() * 4), 0) << what << ": decode rows";
          const std::vector<float> whole = pick(got, 2, &split), base_whole = pick(base, 2, &split);
          EXPECT_EQ(std::memcmp(whole.data(), base_whole.data(), whole.size() * 4), 0) << what << ": unsplit tiles";
          // Rows of split tiles: near the K = 1 kernel's.
          const std::vector<float> part = pick(got, 1, &split), base_part = pick(base, 1, &split);
          ASSERT_FALSE(part.empty()) << what << ": no tile split (the test's steps are meant to split)";
          const double err_k1 = rel_l2(part, base_part);
          EXPECT_LE(err_k1, 4e-3) << what << ": split tiles against K = 1";
          double err_ref = -1.0;
          if (cpu_ref) {
            err_ref = rel_l2(pick(got, 2, nullptr), pick(ref, 2, nullptr));
            EXPECT_LE(err_ref, 2e-2) << what << ": prefill rows against the CPU reference";
            if (slots == 2 && k == 2 && min_tiles == 1) {  // once per tile size: the unsplit kernel's own error
              std::printf("  %s, rows %d: K 1 prefill rows vs CPU rel L2 %.2e\n", shape.c_str(), rows,
                          rel_l2(pick(base, 2, nullptr), pick(ref, 2, nullptr)));
            }
          }
          std::printf("  %s: split rows %zu of %zu, vs K 1 %.2e, vs CPU %.2e\n", what.c_str(), part.size() / row_floats,
                      (part.size() + whole.size()) / row_floats, err_k1, err_ref);
        }
      }
    }
    cuda_ops::DeviceErrors e{};
    gpu_->copy_to_host(&e, errs, sizeof(e));
    EXPECT_EQ(e.bits, 0u) << "device error value " << e.value;
  }
};

// n decode rows at contexts 300 .. 428.
Seqs with_decode(Seqs seqs, int n) {
  for (int i = 0; i < n; ++i) seqs.emplace_back(1, 300 + (i * 37) % 129);
  return seqs;
}

// Against the CPU reference (8 query heads keep the reference short): a 460-token prompt on an empty prefix, on
// a 512-token prefix, a 300-token prompt on a 1500-token prefix, each beside decode rows; GQA 4 at head_dim 128,
// GQA 2 at 64.
TEST_F(CudaMixedSplit, PromptsOnPrefixesMatchReference) {
  uint32_t seed = 200;
  for (const auto& [H, KVH, D] : {std::tuple<int64_t, int64_t, int64_t>{8, 2, 128}, {8, 4, 64}}) {
    run(H, KVH, D, with_decode({{460, 460}}, 12), seed, true);
    run(H, KVH, D, with_decode({{460, 972}}, 12), seed + 10, true);
    run(H, KVH, D, with_decode({{300, 1800}}, 12), seed + 20, true);
    seed += 100;
  }
}

// Several prompts in one step (fresh, on prefixes, a 2-row one, one with 0 rows), decode rows beside, one of them
// a long decode context (the decode plan splits: its counters share the region with the key splits').
TEST_F(CudaMixedSplit, SeveralPromptsAndDecodeRowsMatchReference) {
  const Seqs seqs = with_decode({{230, 230}, {230, 742}, {100, 1600}, {64, 64}, {2, 2}, {0, 40}, {1, 3000}}, 8);
  run(8, 2, 128, seqs, 300, true);
  run(16, 2, 64, seqs, 310, true);
}

// Llama-3-8B's heads (32, KVH 8, D 128), the shapes attention_bench's mixed table times: against K = 1 only.
TEST_F(CudaMixedSplit, LlamaShapesMatchUnsplit) {
  run(32, 8, 128, with_decode({{460, 460}}, 50), 400, false);
  run(32, 8, 128, with_decode({{460, 972}}, 50), 410, false);
  run(32, 8, 128, with_decode({{230, 230}, {230, 742}}, 50), 420, false);
  run(32, 8, 128, {{512, 512}}, 430, false);
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
