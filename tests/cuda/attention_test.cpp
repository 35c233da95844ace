// store_kv + paged causal GQA attention against the CPU reference, several sequences with different KV
// lengths in one step (prefill, chunked prefill and decode mixed), blocks scattered over the cache.
// The CUDA cache is bf16 (CudaBackend::kv_dtype()): store_kv rounds k/v to bf16 (checked bit-exactly
// against host round-to-nearest-even), and the CPU reference (f32 cache) gets the same rounded K/V, so
// the comparison measures only the kernels' own arithmetic.
// Tolerances, relative L2 over the rows of each kind: rows of sequences with q_len == 1 on the CUDA-core
// split-KV decode kernel (fp32 math on the bf16 values) and every row at other head dims 1e-5 (the CUDA
// kernels sum in a different order and use exp2); decode rows on the tensor-core decode kernel (head_dim
// 64/128: Q and P split into bf16 hi + lo parts, ~16 bits each, fp32 accumulation) 3e-5 (the split predicts
// ~5e-6); rows of sequences with q_len >= 2 at head_dim 64/128/256 (tensor-core prefill kernel: Q and P rounded
// to bf16, fp32 accumulation and softmax) 2e-2 (bf16 rounding of Q and P alone predicts ~3e-3 on these
// inputs; the figure is printed).
// Decode is run twice on the same scratch: the split merge's arrival counters must be back at zero, and
// the second result must equal the first bit for bit; a third call writes bf16 (the o-projection's input), which
// must be the f32 output rounded to nearest even, bit for bit. Besides the backend's dispatch, every decode kernel
// (CUDA cores, tensor cores) runs directly with the batch-sized plan and the fixed-chunk (batch-invariant)
// plan, each against the same reference.
#ifdef FERRY_HAS_CUDA

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include <cuda_runtime.h>

#include "attention_test_util.h"
#include "backends/cuda/attention/decode_mma.cuh"
#include "backends/cuda/attention/decode_split.cuh"
#include "backends/cuda/attention/flash_prefill.cuh"
#include "backends/cuda/attention/flash_prefill_wgmma.cuh"
#include "backends/cuda/attention/mixed_attention.cuh"
#include "cuda_test_util.h"
#include "fixtures/paged_layout.h"

namespace ferry::test {
namespace {

std::vector<float> bf16_round(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return r;
}

struct Shape {
  int64_t n_heads, n_kv_heads, head_dim, block_size;
};

class CudaAttention : public CudaOpsTest {
 protected:
  // A bf16 device tensor as floats.
  std::vector<float> download_bf16(const Tensor& t) {
    std::vector<uint16_t> b(size_t(t.numel()));
    gpu_->copy_to_host(b.data(), t, b.size() * 2);
    std::vector<float> f(b.size());
    for (size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_f32(b[i]);
    return f;
  }

  static double decode_bound(int head_dim) {
    using cuda_ops::DecodeKernel;
    return cuda_ops::default_decode_kernel(head_dim, 1) == DecodeKernel::kTensorCores ? 3e-5 : 1e-5;
  }

  // The decode rows of one direct run of a decode kernel (plan given), called twice on the same scratch: the
  // second result must equal the first bit for bit (counters back at zero) and no device error may be set.
  std::vector<float> run_decode_kernel(const cuda_ops::AttentionParams& base, const cuda_ops::DecodeSplitPlan& plan,
                                       int64_t n_out, const std::vector<int32_t>& q_start,
                                       const std::vector<int32_t>& q_len) {
    cuda_ops::AttentionParams p = base;
    const Tensor out = poisoned({n_out});
    p.out = out.ptr<float>();
    p.scratch_bytes = cuda_ops::decode_split_scratch_bytes(p, plan);
    const int64_t scratch_words = int64_t((p.scratch_bytes + 3) / 4);
    const Tensor scratch = upload(DType::I32, {scratch_words}, std::vector<int32_t>(size_t(scratch_words), 0));
    p.scratch = scratch.ptr<float>();
    constexpr int64_t kErrWords = int64_t((sizeof(cuda_ops::DeviceErrors) + 3) / 4);
    const Tensor errs = upload(DType::I32, {kErrWords}, std::vector<int32_t>(size_t(kErrWords), 0));
    p.errors = errs.ptr<cuda_ops::DeviceErrors>();
    cudaStream_t stream = gpu_->stream();
    cuda_ops::decode_split_attention(p, plan, stream);
    const std::vector<float> first = download(out);
    cuda_ops::decode_split_attention(p, plan, stream);
    const std::vector<float> second = download(out);
    cuda_ops::DeviceErrors e{};
    gpu_->copy_to_host(&e, errs, sizeof(e));
    EXPECT_EQ(e.bits, 0u) << "device error value " << e.value;
    EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * 4), 0) << "a repeated call differs";
    std::vector<float> dec;
    const size_t row_floats = size_t(p.n_heads) * size_t(p.head_dim);
    for (size_t s = 0; s < q_len.size(); ++s) {
      if (q_len[s] != 1) continue;
      const size_t b = size_t(q_start[s]) * row_floats;
      dec.insert(dec.end(), first.begin() + long(b), first.begin() + long(b + row_floats));
    }
    return dec;
  }

  void check_decode_kernels(const Shape& sh, const AttentionMeta& gm, const Tensor& gq, const Tensor& gkc,
                            const Tensor& gvc, int32_t n_tokens, float scale, const std::vector<int32_t>& q_start,
                            const std::vector<int32_t>& q_len, const std::vector<float>& ref_dec) {
    using cuda_ops::DecodeKernel;
    int dev = 0, n_sms = 0;
    ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
    ASSERT_EQ(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
    cuda_ops::AttentionParams p = attention_params({gq, gkc, gvc, gm.q_start, gm.q_len, gm.kv_len, gm.block_tables, scale});
    EXPECT_EQ(p.n_tokens, n_tokens);
    EXPECT_EQ(p.n_seqs, gm.n_seqs);
    const int64_t n_out = int64_t(n_tokens) * sh.n_heads * sh.head_dim;
    for (const DecodeKernel kernel : {DecodeKernel::kCudaCores, DecodeKernel::kTensorCores}) {
      const bool tc = kernel == DecodeKernel::kTensorCores;
      if (tc ? !cuda_ops::decode_mma_supports(int(sh.head_dim)) : !cuda_ops::decode_split_supports(int(sh.head_dim)))
        continue;  // head dims the backend runs on the simple kernel (16, 96) or on CUDA cores only (32, 256)
      for (const bool fixed : {false, true}) {
        // The fixed plan's limit (CudaBackend refuses batch-invariant mode past it): 128 chunks of 256 positions.
        if (fixed && int64_t(p.max_blocks_per_seq) * p.block_size >
                         int64_t(cuda_ops::DecodeSplitLimits::kMaxSplits) * cuda_ops::kFixedChunk)
          continue;
        p.batch_invariant = fixed;
        const cuda_ops::DecodeSplitPlan plan = cuda_ops::plan_decode_split(p, n_sms, kernel);
        ASSERT_EQ(plan.kernel, kernel);
        const std::vector<float> got = run_decode_kernel(p, plan, n_out, q_start, q_len);
        const double err = rel_l2(got, ref_dec);
        if (tc) {
          // The tensor-core kernel's options (early K/V requests before the PDL wait, one-pass merge: on by
          // default) change no bit: each combination with an option off against the default.
          ASSERT_TRUE(plan.early_kv && plan.one_pass_merge);
          for (const auto& [early, one_pass] : {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}}) {
            cuda_ops::DecodeSplitPlan alt = plan;
            alt.early_kv = early;
            alt.one_pass_merge = one_pass;
            const std::vector<float> other = run_decode_kernel(p, alt, n_out, q_start, q_len);
            EXPECT_EQ(std::memcmp(other.data(), got.data(), got.size() * 4), 0)
                << "early_kv " << early << ", one_pass_merge " << one_pass << " differs from the default ("
                << (fixed ? "fixed" : "batch") << " plan, " << plan.n_splits << " splits of " << plan.chunk << ")";
          }
        }
        EXPECT_LE(err, tc ? 3e-5 : 1e-5) << (tc ? "tensor" : "CUDA") << "-core decode kernel, "
                                         << (fixed ? "fixed" : "batch") << " plan (" << plan.n_splits
                                         << " splits of " << plan.chunk << ")";
        std::printf("    %s cores, %s plan (%d x %d, rows %d): rel L2 %.2e\n", tc ? "tensor" : "CUDA  ",
                    fixed ? "fixed" : "batch", plan.n_splits, plan.chunk, plan.rows, err);
      }
    }
  }

  // seqs: (q_len, kv_len) per sequence; the cache already holds (random) keys for positions < kv_len - q_len.
  // table_blocks: block tables wider than the longest sequence (as a captured step's), -1 past each one's blocks.
  void check(const Shape& sh, const std::vector<std::pair<int32_t, int32_t>>& seqs, uint32_t seed,
             int32_t table_blocks = 0) {
    const int64_t H = sh.n_heads, KVH = sh.n_kv_heads, D = sh.head_dim, bs = sh.block_size;
    // Scatter: sequence s gets blocks from a shuffled list; unused table entries are -1.
    test::PagedLayout L = test::make_paged_layout(bs, seqs, seed, table_blocks);  // host views below point into it
    const int32_t n_seqs = int32_t(seqs.size()), max_blocks = L.max_blocks, n_tokens = L.n_tokens;
    const int64_t n_blocks = L.n_blocks;
    std::vector<int32_t>& tables = L.tables;
    std::vector<int32_t>& q_start = L.q_start;
    std::vector<int32_t>& q_len = L.q_len;
    std::vector<int32_t>& kv_len = L.kv_len;
    std::vector<int64_t>& slots = L.slots;
    const int64_t cache_n = n_blocks * bs * KVH * D;
    std::vector<float> kc = random_floats(size_t(cache_n), seed + 1), vc = random_floats(size_t(cache_n), seed + 2);
    std::vector<float> k = random_floats(size_t(n_tokens * KVH * D), seed + 3);
    std::vector<float> v = random_floats(k.size(), seed + 4);
    std::vector<float> q = random_floats(size_t(n_tokens * H * D), seed + 5);
    const float scale = 1.0f / std::sqrt(float(D));

    ASSERT_EQ(gpu_->kv_dtype(), DType::BF16);
    const Tensor gkc = upload(DType::BF16, {n_blocks, bs, KVH, D}, to_bf16_bits(kc));
    const Tensor gvc = upload(DType::BF16, {n_blocks, bs, KVH, D}, to_bf16_bits(vc));
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
    const Tensor out = poisoned({n_tokens, H, D}), out2 = poisoned({n_tokens, H, D});
    const Tensor gq = upload(DType::F32, {n_tokens, H, D}, q);
    gpu_->attention(out, gq, gkc, gvc, gm, scale);
    gpu_->attention(out2, gq, gkc, gvc, gm, scale);  // same scratch: counters must have been reset

    AttentionMeta cm = gm;
    cm.q_start = host(DType::I32, {n_seqs}, q_start);
    cm.q_len = host(DType::I32, {n_seqs}, q_len);
    cm.kv_len = host(DType::I32, {n_seqs}, kv_len);
    cm.block_tables = host(DType::I32, {n_seqs, max_blocks}, tables);
    cm.host_q_start = q_start.data();
    cm.host_q_len = q_len.data();
    cm.host_kv_len = kv_len.data();
    cm.host_block_tables = tables.data();
    std::vector<float> kc_r = bf16_round(kc), vc_r = bf16_round(vc), k_r = bf16_round(k), v_r = bf16_round(v);
    const Tensor ckc = host(DType::F32, {n_blocks, bs, KVH, D}, kc_r), cvc = host(DType::F32, {n_blocks, bs, KVH, D}, vc_r);
    cpu_.store_kv(ckc, cvc, host(DType::F32, {n_tokens, KVH, D}, k_r), host(DType::F32, {n_tokens, KVH, D}, v_r),
                  host(DType::I64, {n_tokens}, slots));
    std::vector<float> ref(q.size());
    cpu_.attention(host(DType::F32, {n_tokens, H, D}, ref), host(DType::F32, {n_tokens, H, D}, q), ckc, cvc, cm, scale);

    EXPECT_EQ(rel_l2(download_bf16(gkc), kc_r), 0.0) << "K cache after store_kv";
    EXPECT_EQ(rel_l2(download_bf16(gvc), vc_r), 0.0) << "V cache after store_kv";
    // Split the rows by kind: q_len == 1 (decode) and q_len >= 2 (prefill).
    const std::vector<float> got = download(out);
    const std::vector<float> got2 = download(out2);
    EXPECT_EQ(std::memcmp(got.data(), got2.data(), got.size() * 4), 0) << "a repeated call differs";
    // The same call writing bf16 (the o-projection's input on a GPU): the f32 output rounded, bit for bit, on
    // whichever kernels the dispatch took.
    const Tensor out_bf16 = upload(DType::BF16, {n_tokens, H, D}, std::vector<uint16_t>(size_t(n_tokens * H * D), 0xFFFF));
    gpu_->attention(out_bf16, gq, gkc, gvc, gm, scale);
    EXPECT_EQ(std::memcmp(download_bf16(out_bf16).data(), bf16_round(got).data(), got.size() * 4), 0)
        << "the bf16 output is not the f32 output rounded, H " << H << " KVH " << KVH << " D " << D;
    std::vector<float> got_dec, ref_dec, got_pre, ref_pre;
    const size_t row_floats = size_t(H * D);
    for (int32_t s = 0; s < n_seqs; ++s) {
      auto& g = q_len[size_t(s)] == 1 ? got_dec : got_pre;
      auto& r = q_len[size_t(s)] == 1 ? ref_dec : ref_pre;
      const size_t b = size_t(q_start[size_t(s)]) * row_floats, e = b + size_t(q_len[size_t(s)]) * row_floats;
      g.insert(g.end(), got.begin() + long(b), got.begin() + long(e));
      r.insert(r.end(), ref.begin() + long(b), ref.begin() + long(e));
    }
    const bool tensor_cores = cuda_ops::flash_prefill_supports(int(D));  // prompt rows: 64, 128, 256
    if (!ref_dec.empty()) {
      const double err = rel_l2(got_dec, ref_dec);
      EXPECT_LE(err, decode_bound(int(D))) << "decode rows, H " << H << " KVH " << KVH << " D " << D;
      std::printf("  H %ld KVH %ld D %ld bs %ld: decode rows rel L2 %.2e\n", long(H), long(KVH), long(D), long(bs), err);
      AttentionMeta dm = gm;  // device metadata only
      check_decode_kernels(sh, dm, gq, gkc, gvc, n_tokens, scale, q_start, q_len, ref_dec);
    }
    if (!ref_pre.empty()) {
      const double err = rel_l2(got_pre, ref_pre);
      EXPECT_LE(err, tensor_cores ? 2e-2 : 1e-5) << "prefill rows, H " << H << " KVH " << KVH << " D " << D;
      std::printf("  H %ld KVH %ld D %ld bs %ld: prefill rows rel L2 %.2e (%s)\n", long(H), long(KVH), long(D),
                  long(bs), err, tensor_cores ? "bf16 tensor cores" : "fp32");
    }
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

// Prefill tiles: q_len around the 64-row tile (63, 64, 65, 129), kv_len not a multiple of the block size
// nor of the 64-key tile, a sequence with no rows this step (q_len 0), prefill chunks after cached tokens.
TEST_F(CudaAttention, PrefillTileEdges) {
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{63, 63}, {64, 64}, {65, 70}, {0, 10}, {129, 300},
                                                         {2, 2}, {17, 1000}, {1, 77}};
  check({32, 8, 128, 16}, seqs, 20);
  check({16, 2, 64, 16}, seqs, 21);
  check({8, 8, 128, 32}, seqs, 22);
  check({12, 4, 64, 8}, seqs, 23);
}

// Block sizes that are not powers of two (the K/V copies divide positions by the block size once per key):
// 24 and 40, prompts across several 64-key tiles, a chunk after cached positions, decode rows beside.
TEST_F(CudaAttention, PrefillOddBlockSizes) {
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{150, 150}, {70, 333}, {1, 260}, {5, 5}};
  check({16, 4, 128, 24}, seqs, 24);
  check({8, 2, 64, 40}, seqs, 25);
}

// Long contexts: a 1100-token fresh prefill, a 300-token chunk at the end of 5000, decode at 5000 and 4097.
TEST_F(CudaAttention, LongContextPrefillAndDecode) {
  check({4, 2, 128, 16}, {{1100, 1100}, {300, 5000}, {1, 5000}, {1, 4097}}, 30);
  check({8, 1, 64, 16}, {{700, 5003}, {1, 5003}}, 31);
}

// Many decode sequences of different lengths in one step (the split count adapts to the batch), GQA groups
// of 1, 2, 4, 8 and 6 heads (6: a group split over two blocks of 4 rows).
TEST_F(CudaAttention, ManyDecodeSequences) {
  std::vector<std::pair<int32_t, int32_t>> seqs;
  for (int32_t i = 0; i < 40; ++i) seqs.emplace_back(1, 1 + (i * 397) % 2500);
  check({8, 8, 128, 16}, seqs, 40);
  check({8, 4, 64, 16}, seqs, 41);
  check({16, 4, 128, 16}, seqs, 42);
  check({32, 4, 128, 16}, seqs, 43);
  check({12, 2, 64, 16}, seqs, 44);
  check({4, 1, 32, 16}, seqs, 45);
  check({2, 1, 256, 16}, seqs, 46);
}

// GQA ratios 1, 4 and 8 at head_dim 64 and 128: ragged prefills spanning several 128-row query tiles,
// chunked prefill after cached positions, decode rows deep in the context, block size 16 and 32.
TEST_F(CudaAttention, GqaRatiosPrefillAndDecode) {
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{257, 257}, {130, 700}, {1, 2049}, {5, 5}, {1, 333}};
  check({8, 8, 128, 16}, seqs, 50);
  check({16, 4, 128, 32}, seqs, 51);
  check({32, 4, 128, 16}, seqs, 52);
  check({8, 8, 64, 16}, seqs, 53);
  check({16, 4, 64, 16}, seqs, 54);
  check({16, 2, 64, 32}, seqs, 55);
}

// A batch of 64 decode rows (the split heuristic picks one chunk: the kernel writes rows directly) and a
// batch of 3 long ones (many chunks merged by the last block), on one backend.
TEST_F(CudaAttention, DecodeBatchSizes) {
  std::vector<std::pair<int32_t, int32_t>> many;
  for (int32_t i = 0; i < 64; ++i) many.emplace_back(1, 100 + (i * 733) % 1900);
  check({32, 8, 128, 16}, many, 60);
  check({32, 8, 128, 16}, {{1, 4096}, {1, 3001}, {1, 17}}, 61);
}

// The decode kernels at batch 1, 8 and 64, GQA 1, 4 and 8, head_dim 64 and 128, contexts that are not
// multiples of the chunk (batch 1: 4097 against chunks of 128) nor of the 16-position tile; check() runs
// every kernel directly with both plans besides the backend's dispatch.
TEST_F(CudaAttention, DecodeKernelsBatchGqaHeadDims) {
  uint32_t seed = 70;
  for (const int64_t D : {int64_t(64), int64_t(128)}) {
    for (const auto& [H, KVH] : {std::pair<int64_t, int64_t>{8, 8}, {32, 8}, {32, 4}}) {
      check({H, KVH, D, 16}, {{1, 4097}}, seed++);
      std::vector<std::pair<int32_t, int32_t>> b8, b64;
      for (int32_t i = 0; i < 8; ++i) b8.emplace_back(1, 300 + 517 * i);
      for (int32_t i = 0; i < 64; ++i) b64.emplace_back(1, 50 + (i * 337) % 700);
      check({H, KVH, D, 16}, b8, seed++);
      check({H, KVH, D, 16}, b64, seed++);
    }
  }
  // GQA 16 (one full 16-row tile) and 32 (two row groups), block sizes 8 and 32 (tiles across / inside blocks).
  check({16, 1, 128, 8}, {{1, 1000}, {1, 77}, {1, 4000}}, seed++);
  check({64, 2, 64, 32}, {{1, 1000}, {1, 77}, {1, 2049}}, seed++);
}

// The standalone tensor-core kernel's early K/V requests (the ring's first tiles of positions below kv_len - 1 before
// the PDL wait) and one-pass merge (helper dattn2), batch 1 and batch > 1, contexts across split boundaries: 33 splits
// (the merge's second round past 32 splits), 86 splits of one KV head (2 KV heads), 71 splits with 16-row tiles (4
// merge items per thread), GQA 6, head_dim 64 and 128, block size 8 (tiles across blocks), contexts 1 and 2 (no
// early tile). check() runs the dispatch and each kernel directly against the CPU reference, and
// check_decode_kernels each option off against the default bit for bit.
TEST_F(CudaAttention, DecodeEarlyKvAndOnePassMerge) {
  check({32, 8, 128, 16}, {{1, 4113}}, 200);
  check({32, 8, 128, 16}, {{1, 4095}, {1, 129}, {1, 2}}, 201);
  check({8, 2, 128, 16}, {{1, 16400}}, 202);
  check({16, 1, 128, 16}, {{1, 9000}, {1, 4097}}, 203);
  check({12, 2, 64, 16}, {{1, 8193}}, 204);
  check({32, 4, 64, 8}, {{1, 5000}, {1, 300}, {1, 1}}, 205);
}

// Decode at depth (issue 25 item 5), batch 1 and 3, shuffled blocks: contexts of 32k-40k positions, and tables wider
// than the context as a captured step has them (LlamaModel rounds max_blocks_per_seq up to a power of two: the plan's
// bound is ~2x the context, and each row cuts its own kv_len into the plan's splits, plan.fit_chunk). 32,896: tg128's
// last step at depth 32k in a 4,096-block table (Llama-3-8B's heads on 132 SMs: 33 splits of up to 2,048 planned,
// all 33 used with chunks of 1,024); 40,001 at the exact width (33 splits of 1,216, the last one short); three rows of
// 33,000 / 20,000 / 1,500 in a 4,096-block table (2 KV heads: 44 splits, so the merge's second round; chunks of
// 768 / 512 / 128, the last the kMinChunk floor), and at head_dim 64, block size 32 (22 splits: 1,536 / 960 / 128).
// check() runs the dispatch and each kernel directly against the CPU reference (the fixed plan only up to its 32,768
// positions).
TEST_F(CudaAttention, DecodeAtDepthInWideTables) {
  check({32, 8, 128, 16}, {{1, 32896}}, 210, 4096);
  check({32, 8, 128, 16}, {{1, 40001}}, 211);
  check({8, 2, 128, 16}, {{1, 33000}, {1, 20000}, {1, 1500}}, 212, 4096);
  check({16, 4, 64, 32}, {{1, 33000}, {1, 20000}, {1, 1500}}, 213, 2048);
}

// Batch-invariant plans: a sequence's decode row is bit-identical alone and inside a batch of 40 other
// sequences, for each decode kernel (the fixed-chunk plan depends on the context bound only).
TEST_F(CudaAttention, DecodeKernelsFixedPlanBatchInvariant) {
  using cuda_ops::DecodeKernel;
  const int64_t H = 32, KVH = 8, D = 128, bs = 16;
  std::vector<std::pair<int32_t, int32_t>> seqs;
  for (int32_t i = 0; i < 40; ++i) seqs.emplace_back(1, 1 + (i * 397 + 1500) % 2500);
  test::PagedLayout L = test::make_paged_layout(bs, seqs, 90);
  const int64_t cache_n = L.n_blocks * bs * KVH * D;
  const Tensor gkc = upload(DType::BF16, {L.n_blocks, bs, KVH, D}, to_bf16_bits(random_floats(size_t(cache_n), 91)));
  const Tensor gvc = upload(DType::BF16, {L.n_blocks, bs, KVH, D}, to_bf16_bits(random_floats(size_t(cache_n), 92)));
  const Tensor gq = upload(DType::F32, {L.n_tokens, H, D}, random_floats(size_t(L.n_tokens * H * D), 93));
  const int32_t n_seqs = int32_t(seqs.size());
  AttentionMeta gm;
  gm.n_seqs = n_seqs;
  gm.block_size = int32_t(bs);
  gm.max_blocks_per_seq = L.max_blocks;
  gm.q_start = upload(DType::I32, {n_seqs}, L.q_start);
  gm.q_len = upload(DType::I32, {n_seqs}, L.q_len);
  gm.kv_len = upload(DType::I32, {n_seqs}, L.kv_len);
  gm.block_tables = upload(DType::I32, {n_seqs, L.max_blocks}, L.tables);
  cuda_ops::AttentionParams p = attention_params({gq, gkc, gvc, gm.q_start, gm.q_len, gm.kv_len, gm.block_tables, 0.088f});
  p.batch_invariant = true;
  const int64_t n_out = int64_t(L.n_tokens) * H * D;
  for (const DecodeKernel kernel : {DecodeKernel::kCudaCores, DecodeKernel::kTensorCores}) {
    const std::vector<int32_t> one_start = {L.q_start[0]}, one_len = {L.q_len[0]};
    cuda_ops::AttentionParams alone = p;
    alone.n_seqs = 1;
    const std::vector<float> a = run_decode_kernel(alone, cuda_ops::plan_decode_split(alone, 132, kernel), n_out,
                                                   one_start, one_len);
    const std::vector<float> all = run_decode_kernel(p, cuda_ops::plan_decode_split(p, 132, kernel), n_out,
                                                     L.q_start, L.q_len);
    ASSERT_EQ(a.size(), size_t(H * D));
    for (const float x : a) ASSERT_TRUE(std::isfinite(x));
    EXPECT_EQ(std::memcmp(a.data(), all.data(), a.size() * 4), 0)
        << (kernel == DecodeKernel::kTensorCores ? "tensor" : "CUDA") << "-core kernel: row 0 alone differs";
  }
}

// Mixed serving steps (prompt chunks beside many decode rows, the shape of issue 4's steps scaled down): the
// backend's dispatch (the one-launch kernel, mixed_attention.cuh) against the CPU reference.
TEST_F(CudaAttention, MixedStepPromptsAndDecodeRows) {
  std::vector<std::pair<int32_t, int32_t>> seqs = {{230, 742}, {150, 150}};
  for (int32_t i = 0; i < 30; ++i) seqs.emplace_back(1, 300 + (i * 37) % 129);
  check({32, 8, 128, 16}, seqs, 100);
  seqs[0] = {97, 97};
  check({16, 4, 64, 16}, seqs, 101);
  check({8, 1, 128, 16}, {{70, 70}, {1, 1}, {1, 900}, {3, 40}}, 102);  // GQA 8: one 8-row decode tile
}

// The one-launch kernel directly, every configuration (64 / 128-row prefill tiles, 1 / 2 prefill slots per SM),
// against the two-launch path (flash prefill with 128-row tiles, then split-KV decode) on the same inputs: decode
// rows bit-identical (the same block code and plan), prefill rows bit-identical at 128 rows and within 1e-6 at
// 64 (the same per-row arithmetic: a 128-row tile only adds fully masked key tiles, which leave a row's state
// unchanged); each call twice on the same scratch (the ticket counter is back at zero: same bits). Batches:
// prompts + decode rows (prompt slots first), decode rows only and a q_len-0 sequence beside (decode first),
// several long prompts (many tickets per slot), and split decode (few decode rows: arrival counters in use).
TEST_F(CudaAttention, MixedKernelConfigsMatchTwoLaunches) {
  const std::vector<std::vector<std::pair<int32_t, int32_t>>> batches = {
      {{300, 812}, {1, 500}, {1, 77}, {64, 64}, {1, 640}, {2, 2}},
      {{1, 300}, {1, 17}, {0, 40}, {1, 1000}},
      {{700, 700}, {513, 1300}, {129, 129}},
      {{40, 40}, {1, 3000}},
  };
  uint32_t seed = 110;
  for (const auto& [H, KVH, D] : {std::tuple<int64_t, int64_t, int64_t>{32, 8, 128}, {16, 2, 64}, {32, 2, 128}}) {
    for (const auto& seqs : batches) {
      const int64_t bs = 16;
      test::PagedLayout L = test::make_paged_layout(bs, seqs, seed);
      const int64_t cache_n = L.n_blocks * bs * KVH * D;
      const Tensor gkc = upload(DType::BF16, {L.n_blocks, bs, KVH, D}, to_bf16_bits(random_floats(size_t(cache_n), seed + 1)));
      const Tensor gvc = upload(DType::BF16, {L.n_blocks, bs, KVH, D}, to_bf16_bits(random_floats(size_t(cache_n), seed + 2)));
      const Tensor gq = upload(DType::F32, {L.n_tokens, H, D}, random_floats(size_t(L.n_tokens * H * D), seed + 3));
      seed += 4;
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
      p.scratch_bytes = cuda_ops::decode_split_scratch_bytes(p, plan);
      const int64_t scratch_words = int64_t((p.scratch_bytes + 3) / 4);
      const Tensor scratch = upload(DType::I32, {scratch_words}, std::vector<int32_t>(size_t(scratch_words), 0));
      p.scratch = scratch.ptr<float>();
      const int64_t n_out = int64_t(L.n_tokens) * H * D;
      cudaStream_t stream = gpu_->stream();
      // Rows of sequences with q_len == 1 (decode) or >= 2 (prefill) of a result.
      const auto rows = [&](const std::vector<float>& all, bool decode) {
        std::vector<float> r;
        const size_t row_floats = size_t(H * D);
        for (size_t i = 0; i < seqs.size(); ++i) {
          if (L.q_len[i] == 0 || (L.q_len[i] == 1) != decode) continue;
          const size_t b = size_t(L.q_start[i]) * row_floats;
          r.insert(r.end(), all.begin() + long(b), all.begin() + long(b + size_t(L.q_len[i]) * row_floats));
        }
        return r;
      };
      const Tensor ref_out = poisoned({n_out});
      p.out = ref_out.ptr<float>();
      cuda_ops::flash_prefill_attention(p, stream);
      cuda_ops::decode_split_attention(p, plan, stream);
      const std::vector<float> ref = download(ref_out);
      for (const float x : rows(ref, false)) ASSERT_TRUE(std::isfinite(x));
      for (const float x : rows(ref, true)) ASSERT_TRUE(std::isfinite(x));
      for (const int tile_rows : {64, 128}) {
        for (const int slots : {1, 2}) {
          const Tensor out = poisoned({n_out});
          p.out = out.ptr<float>();
          const cuda_ops::MixedAttentionConfig cfg{.tile_rows = tile_rows, .slots_per_sm = slots};
          cuda_ops::mixed_attention(p, plan, stream, cfg);
          const std::vector<float> first = download(out);
          cuda_ops::mixed_attention(p, plan, stream, cfg);
          const std::vector<float> second = download(out);
          const std::string what = "H " + std::to_string(H) + " KVH " + std::to_string(KVH) + " D " +
                                   std::to_string(D) + ", " + std::to_string(seqs.size()) + " seqs, rows " +
                                   std::to_string(tile_rows) + " slots " + std::to_string(slots);
          EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * 4), 0) << what << ": a repeated call differs";
          const std::vector<float> dec = rows(first, true), ref_dec = rows(ref, true);
          EXPECT_EQ(std::memcmp(dec.data(), ref_dec.data(), dec.size() * 4), 0) << what << ": decode rows";
          const std::vector<float> pre = rows(first, false), ref_pre = rows(ref, false);
          const bool same = std::memcmp(pre.data(), ref_pre.data(), pre.size() * 4) == 0;
          if (tile_rows == 128) {
            EXPECT_TRUE(same) << what << ": prefill rows";
          }
          const double err = pre.empty() ? 0.0 : rel_l2(pre, ref_pre);
          EXPECT_LE(err, 1e-6) << what << ": prefill rows";
          std::printf("  %s: prefill rows %s (rel L2 %.2e)\n", what.c_str(), same ? "bit-identical" : "differ", err);
        }
      }
      cuda_ops::DeviceErrors e{};
      gpu_->copy_to_host(&e, errs, sizeof(e));
      EXPECT_EQ(e.bits, 0u) << "device error value " << e.value;
    }
  }
}

// The prefill kernel (flash_prefill.cuh) run directly, head_dim 128 and 64, block sizes 16, 8 and 24, prompts on
// prefixes: every prompt row finite and the run deterministic; with one block table entry of a prompt set out of
// range it reports kBadBlock (and zero-fills those keys). Its values against the CPU reference: the attention tests
// above, through the backend.
TEST_F(CudaAttention, PrefillKernelReportsBadBlocks) {
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{300, 812}, {64, 64}, {129, 129}, {1, 50}, {200, 1000}, {2, 2}};
  uint32_t seed = 140;
  for (const auto& [H, KVH, D, bs] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{32, 8, 128, 16}, {16, 2, 64, 8},
                                      {8, 8, 128, 24}}) {
    for (const bool bad_block : {false, true}) {
      test::PagedLayout L = test::make_paged_layout(bs, seqs, seed);
      if (bad_block) L.tables[size_t(4 * L.max_blocks + 7)] = int32_t(L.n_blocks + 3);  // sequence 4, positions 7bs..
      const int64_t cache_n = L.n_blocks * bs * KVH * D;
      const Tensor gkc = upload(DType::BF16, {L.n_blocks, bs, KVH, D}, to_bf16_bits(random_floats(size_t(cache_n), seed + 1)));
      const Tensor gvc = upload(DType::BF16, {L.n_blocks, bs, KVH, D}, to_bf16_bits(random_floats(size_t(cache_n), seed + 2)));
      const Tensor gq = upload(DType::F32, {L.n_tokens, H, D}, random_floats(size_t(L.n_tokens * H * D), seed + 3));
      seed += 4;
      const int32_t n_seqs = int32_t(seqs.size());
      const Tensor q_start = upload(DType::I32, {n_seqs}, L.q_start), q_len = upload(DType::I32, {n_seqs}, L.q_len);
      const Tensor kv_len = upload(DType::I32, {n_seqs}, L.kv_len);
      const Tensor tables = upload(DType::I32, {n_seqs, L.max_blocks}, L.tables);
      constexpr int64_t kErrWords = int64_t((sizeof(cuda_ops::DeviceErrors) + 3) / 4);
      const int64_t n_out = int64_t(L.n_tokens) * H * D;
      cudaStream_t stream = gpu_->stream();
      const std::string what = "H " + std::to_string(H) + " KVH " + std::to_string(KVH) + " D " + std::to_string(D) +
                               " bs " + std::to_string(bs) + (bad_block ? ", a bad block" : "");
      // Prompt rows (q_len >= 2) of one run, and the device error bits it left.
      const auto run = [&](uint32_t& bits) {
        const Tensor errs = upload(DType::I32, {kErrWords}, std::vector<int32_t>(size_t(kErrWords), 0));
        const Tensor out = poisoned({n_out});
        cuda_ops::AttentionParams p =
            attention_params({gq, gkc, gvc, q_start, q_len, kv_len, tables, 1.0f / std::sqrt(float(D))});
        p.out = out.ptr<float>();
        p.errors = errs.ptr<cuda_ops::DeviceErrors>();
        cuda_ops::flash_prefill_attention(p, stream);
        const std::vector<float> all = download(out);
        cuda_ops::DeviceErrors e{};
        gpu_->copy_to_host(&e, errs, sizeof(e));
        bits = e.bits;
        std::vector<float> r;
        const size_t row_floats = size_t(H * D);
        for (size_t i = 0; i < seqs.size(); ++i) {
          if (L.q_len[i] < 2) continue;
          const size_t b = size_t(L.q_start[i]) * row_floats;
          r.insert(r.end(), all.begin() + long(b), all.begin() + long(b + size_t(L.q_len[i]) * row_floats));
        }
        return r;
      };
      uint32_t bits_a = 0, bits_b = 0;
      const std::vector<float> a = run(bits_a), b = run(bits_b);
      for (const float x : a) ASSERT_TRUE(std::isfinite(x)) << what;
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << what << ": two runs differ";
      EXPECT_EQ(bits_a, bad_block ? uint32_t(cuda_ops::kBadBlock) : 0u) << what;
      EXPECT_EQ(bits_b, bits_a) << what;
    }
  }
}

// The wgmma prefill kernel (flash_prefill_wgmma.cuh) directly against the CPU reference (fp32 over the
// same bf16-rounded cache): the prompt rows (q_len >= 2) within the prefill tolerance of check() (2e-2; bf16 Q and P
// predict ~3e-3), every prompt row written and finite, the other rows (q_len 0 or 1) left as they were (NaN poison),
// no device error; and the mma.sync kernel's output on the same inputs for comparison (printed, and within 2e-2 too).
// Shapes: GQA 4 with ragged prompts, prompts on cached prefixes (chunked prefill) and a decode row beside them;
// one 2048-token prompt; head_dim 64 with block size 8; MHA with block size 24 (not a power of two). Last, one block
// table entry of a prompt out of range: both kernels report kBadBlock and still write finite rows.
class CudaAttentionWgmma : public CudaAttention {
 protected:
  void check_wgmma(const Shape& sh, const std::vector<std::pair<int32_t, int32_t>>& seqs, uint32_t seed,
                   bool bad_block = false) {
    const int64_t H = sh.n_heads, KVH = sh.n_kv_heads, D = sh.head_dim, bs = sh.block_size;
    test::PagedLayout L = test::make_paged_layout(bs, seqs, seed);
    const int32_t n_seqs = int32_t(seqs.size());
    if (bad_block) L.tables[size_t(0 * L.max_blocks + 5)] = int32_t(L.n_blocks + 3);  // sequence 0, positions 5bs..
    const int64_t cache_n = L.n_blocks * bs * KVH * D;
    std::vector<float> kc = bf16_round(random_floats(size_t(cache_n), seed + 1));  // (n_blocks, bs, KVH, D)
    std::vector<float> vc = bf16_round(random_floats(size_t(cache_n), seed + 2));
    std::vector<float> q = random_floats(size_t(L.n_tokens * H * D), seed + 3);  // (n_tokens, H, D)
    const float scale = 1.0f / std::sqrt(float(D));
    const Tensor gkc = upload(DType::BF16, {L.n_blocks, bs, KVH, D}, to_bf16_bits(kc));
    const Tensor gvc = upload(DType::BF16, {L.n_blocks, bs, KVH, D}, to_bf16_bits(vc));
    const Tensor gq = upload(DType::F32, {L.n_tokens, H, D}, q);
    const Tensor q_start = upload(DType::I32, {n_seqs}, L.q_start), q_len = upload(DType::I32, {n_seqs}, L.q_len);
    const Tensor kv_len = upload(DType::I32, {n_seqs}, L.kv_len);
    const Tensor tables = upload(DType::I32, {n_seqs, L.max_blocks}, L.tables);

    std::vector<float> ref;
    if (!bad_block) {
      const AttentionMeta cm = test::host_attention_meta(L, int32_t(bs));
      ref.resize(q.size());
      cpu_.attention(host(DType::F32, {L.n_tokens, H, D}, ref), host(DType::F32, {L.n_tokens, H, D}, q),
                     host(DType::F32, {L.n_blocks, bs, KVH, D}, kc), host(DType::F32, {L.n_blocks, bs, KVH, D}, vc),
                     cm, scale);
    }
    const std::string what = "H " + std::to_string(H) + " KVH " + std::to_string(KVH) + " D " + std::to_string(D) +
                             " bs " + std::to_string(bs) + (bad_block ? ", a bad block" : "");
    constexpr int64_t kErrWords = int64_t((sizeof(cuda_ops::DeviceErrors) + 3) / 4);
    const size_t row_floats = size_t(H * D);
    // Prompt rows of one run (the wgmma kernel, or the mma.sync kernel when mma); every other row must
    // still be NaN. bits: the device error bits it left.
    // bf16: the output as bf16 bits (AttentionParams::out_bf16, poisoned with 0xFFFF), returned widened to f32.
    const auto run = [&](bool mma, uint32_t& bits, int32_t prefill_tiles = -1, bool bf16 = false) {
      const Tensor errs = upload(DType::I32, {kErrWords}, std::vector<int32_t>(size_t(kErrWords), 0));
      const Tensor out = bf16 ? upload(DType::BF16, {L.n_tokens, H, D},
                                       std::vector<uint16_t>(size_t(L.n_tokens * H * D), 0xFFFF))
                              : poisoned({L.n_tokens, H, D});
      cuda_ops::AttentionParams p = attention_params({gq, gkc, gvc, q_start, q_len, kv_len, tables, scale});
      p.out = bf16 ? nullptr : out.ptr<float>();
      p.errors = errs.ptr<cuda_ops::DeviceErrors>();
      p.prefill_tiles = prefill_tiles;
      if (bf16) p.out_bf16 = static_cast<uint16_t*>(out.data);
      if (mma) {
        cuda_ops::flash_prefill_attention(p, gpu_->stream());
      } else {
        cuda_ops::flash_prefill_wgmma_attention(p, gpu_->stream());
      }
      const std::vector<float> all = bf16 ? download_bf16(out) : download(out);
      cuda_ops::DeviceErrors e{};
      gpu_->copy_to_host(&e, errs, sizeof(e));
      bits = e.bits;
      std::vector<float> r;
      size_t untouched = 0, other = 0;
      for (size_t i = 0; i < seqs.size(); ++i) {
        const size_t b = size_t(L.q_start[i]) * row_floats, e2 = b + size_t(L.q_len[i]) * row_floats;
        if (L.q_len[i] >= 2) {
          r.insert(r.end(), all.begin() + long(b), all.begin() + long(e2));
        } else {
          for (size_t k = b; k < e2; ++k) untouched += std::isnan(all[k]) ? 1 : 0;
          other += e2 - b;
        }
      }
      EXPECT_EQ(untouched, other) << what << ": rows of sequences with q_len < 2 were written";
      return r;
    };
    std::vector<float> ref_pre;
    for (size_t i = 0; i < seqs.size() && !bad_block; ++i) {
      if (L.q_len[i] < 2) continue;
      const size_t b = size_t(L.q_start[i]) * row_floats;
      ref_pre.insert(ref_pre.end(), ref.begin() + long(b), ref.begin() + long(b + size_t(L.q_len[i]) * row_floats));
    }
    uint32_t bits_mma = 0;
    const std::vector<float> got_mma = run(true, bits_mma);
    const uint32_t want_bits = bad_block ? uint32_t(cuda_ops::kBadBlock) : 0u;
    EXPECT_EQ(bits_mma, want_bits) << what << ", mma.sync kernel";
    {
      const char* name = "wgmma";
      uint32_t bits = 0;
      const std::vector<float> got = run(false, bits);
      size_t bad = 0;
      for (const float x : got) bad += std::isfinite(x) ? 0 : 1;
      EXPECT_EQ(bad, 0u) << what << ", " << name << ": prompt rows not written or not finite";
      EXPECT_EQ(bits, want_bits) << what << ", " << name << ": device error bits";
      const double vs_mma = rel_l2(got, got_mma);
      EXPECT_LE(vs_mma, 2e-2) << what << ", " << name << " vs the mma.sync kernel";
      if (bad_block) {
        std::printf("  %s, %s: bits %u, vs mma.sync %.2e\n", what.c_str(), name, bits, vs_mma);
      } else {
        const double err = rel_l2(got, ref_pre);
        EXPECT_LE(err, 2e-2) << what << ", " << name;
        std::printf("  %s, %s: rel L2 %.2e (mma.sync kernel %.2e, vs it %.2e)\n", what.c_str(), name, err,
                    rel_l2(got_mma, ref_pre), vs_mma);
      }
    }
    // The grid bounded by the exact tile count (AttentionParams::prefill_tiles) and by a larger one: the same tiles,
    // the same bits as the loose default grid (n_tokens / 128 + n_seqs tile rows).
    int32_t tiles = 0;
    for (const int32_t ql : L.q_len)
      if (ql >= 2) tiles += (ql + 127) / 128;
    uint32_t b0 = 0, b1 = 0, b2 = 0;
    const std::vector<float> loose = run(false, b0), exact = run(false, b1, tiles);
    const std::vector<float> above = run(false, b2, tiles + 3);
    EXPECT_EQ(std::memcmp(loose.data(), exact.data(), loose.size() * 4), 0) << what << ": exact tile bound";
    EXPECT_EQ(std::memcmp(loose.data(), above.data(), loose.size() * 4), 0) << what << ": larger tile bound";
    EXPECT_EQ(b1, b0);
    // A bf16 output (the o-projection's input) from both kernels: the f32 output rounded to nearest even, bit for bit.
    for (const bool mma : {false, true}) {
      uint32_t b3 = 0, b4 = 0;
      const std::vector<float> f32 = run(mma, b3), half = run(mma, b4, -1, true);
      EXPECT_EQ(std::memcmp(bf16_round(f32).data(), half.data(), half.size() * 4), 0)
          << what << ": bf16 output of the " << (mma ? "mma.sync" : "wgmma") << " kernel is not its f32 output rounded";
      EXPECT_EQ(b4, b3);
    }
  }
};

const std::vector<std::pair<int32_t, int32_t>> kWgmmaSeqs = {{300, 812}, {129, 129}, {64, 64}, {2, 2}, {1, 50},
                                                             {0, 10},    {17, 1000}, {200, 200}, {127, 400}};

TEST_F(CudaAttentionWgmma, PrefillWgmmaGqaRaggedChunked) { check_wgmma({32, 8, 128, 16}, kWgmmaSeqs, 160); }
TEST_F(CudaAttentionWgmma, PrefillWgmmaLongPrompt) { check_wgmma({4, 1, 128, 16}, {{2048, 2048}, {1, 100}}, 161); }
TEST_F(CudaAttentionWgmma, PrefillWgmmaHeadDim64) { check_wgmma({16, 2, 64, 8}, kWgmmaSeqs, 162); }
TEST_F(CudaAttentionWgmma, PrefillWgmmaMhaBlockSize24) {
  check_wgmma({8, 8, 128, 24}, {{150, 150}, {70, 333}, {5, 5}, {1, 260}}, 163);
}
TEST_F(CudaAttentionWgmma, PrefillWgmmaBadBlock) { check_wgmma({32, 8, 128, 16}, kWgmmaSeqs, 164, true); }

// attention()'s dispatch for a step the host knows is prompt-only (min_q_len >= 2) with 128-row tiles filling two
// waves: at head_dim 64 and 128 it runs the wgmma kernel (its output bit-identical to a direct default call), in
// batch-invariant mode the mma.sync kernel (bit-identical to flash_prefill_attention's, whose arithmetic the mixed
// kernel shares).
TEST_F(CudaAttentionWgmma, PrefillDispatchPromptOnlySteps) {
  for (const auto& [D, invariant] : {std::pair<int64_t, bool>{128, false}, {128, true}, {64, false}, {64, true}}) {
    const int64_t H = 32, KVH = 8, bs = 16;
    const std::vector<std::pair<int32_t, int32_t>> seqs = {{2048, 2048}, {1500, 1700}, {548, 548}};
    test::PagedLayout L = test::make_paged_layout(bs, seqs, 170);
    const int32_t n_seqs = int32_t(seqs.size());
    const int64_t cache_n = L.n_blocks * bs * KVH * D;
    const Tensor gkc = upload(DType::BF16, {L.n_blocks, bs, KVH, D}, to_bf16_bits(random_floats(size_t(cache_n), 171)));
    const Tensor gvc = upload(DType::BF16, {L.n_blocks, bs, KVH, D}, to_bf16_bits(random_floats(size_t(cache_n), 172)));
    const Tensor gq = upload(DType::F32, {L.n_tokens, H, D}, random_floats(size_t(L.n_tokens * H * D), 173));
    const Tensor q_start = upload(DType::I32, {n_seqs}, L.q_start), q_len = upload(DType::I32, {n_seqs}, L.q_len);
    const Tensor kv_len = upload(DType::I32, {n_seqs}, L.kv_len);
    const Tensor tables = upload(DType::I32, {n_seqs, L.max_blocks}, L.tables);
    cuda_ops::AttentionParams p =
        attention_params({gq, gkc, gvc, q_start, q_len, kv_len, tables, 1.0f / std::sqrt(float(D))});
    p.batch_invariant = invariant;
    p.max_q_len = 2048;
    p.min_q_len = 548;
    p.scratch_bytes = cuda_ops::attention_scratch_bytes(p);
    const int64_t scratch_words = int64_t(std::max<size_t>(4, (p.scratch_bytes + 3) / 4));
    const Tensor scratch = upload(DType::I32, {scratch_words}, std::vector<int32_t>(size_t(scratch_words), 0));
    p.scratch = scratch.ptr<float>();
    cudaStream_t stream = gpu_->stream();
    const auto run = [&](int which) {  // 0: attention(), 1: the wgmma kernel, 2: the mma.sync kernel
      const Tensor out = poisoned({L.n_tokens, H, D});
      cuda_ops::AttentionParams q = p;
      q.out = out.ptr<float>();
      if (which == 0) cuda_ops::attention(q, stream);
      if (which == 1) cuda_ops::flash_prefill_wgmma_attention(q, stream);
      if (which == 2) cuda_ops::flash_prefill_attention(q, stream);
      return download(out);
    };
    const std::vector<float> got = run(0), wg = run(1), mma = run(2);
    for (const float x : got) ASSERT_TRUE(std::isfinite(x)) << "D " << D;
    // A prompt-only step too short to fill two waves of 128-row tiles: wgmma too outside batch-invariant mode
    // (2026-11-30), and the one-launch kernel in it (a prompt's bits must not depend on what shares its step).
    {
      const std::vector<std::pair<int32_t, int32_t>> short_seqs = {{460, 460}, {129, 600}};
      test::PagedLayout S = test::make_paged_layout(bs, short_seqs, 175);
      const int64_t sn = S.n_blocks * bs * KVH * D;
      const Tensor skc = upload(DType::BF16, {S.n_blocks, bs, KVH, D}, to_bf16_bits(random_floats(size_t(sn), 176)));
      const Tensor svc = upload(DType::BF16, {S.n_blocks, bs, KVH, D}, to_bf16_bits(random_floats(size_t(sn), 177)));
      const Tensor sq = upload(DType::F32, {S.n_tokens, H, D}, random_floats(size_t(S.n_tokens * H * D), 178));
      const Tensor s_start = upload(DType::I32, {2}, S.q_start), s_len = upload(DType::I32, {2}, S.q_len);
      const Tensor s_kv = upload(DType::I32, {2}, S.kv_len), s_tab = upload(DType::I32, {2, S.max_blocks}, S.tables);
      cuda_ops::AttentionParams sp = p;
      sp.q = sq.ptr<float>(), sp.k_cache = skc.ptr<__nv_bfloat16>(), sp.v_cache = svc.ptr<__nv_bfloat16>();
      sp.q_start = s_start.ptr<int32_t>(), sp.q_len = s_len.ptr<int32_t>(), sp.kv_len = s_kv.ptr<int32_t>();
      sp.block_tables = s_tab.ptr<int32_t>(), sp.n_seqs = 2, sp.max_blocks_per_seq = S.max_blocks;
      sp.n_blocks = int32_t(S.n_blocks), sp.n_tokens = S.n_tokens, sp.max_q_len = 460, sp.min_q_len = 129;
      sp.scratch_bytes = cuda_ops::attention_scratch_bytes(sp);
      const int64_t words = int64_t(std::max<size_t>(4, (sp.scratch_bytes + 3) / 4));
      const Tensor sscratch = upload(DType::I32, {words}, std::vector<int32_t>(size_t(words), 0));
      sp.scratch = sscratch.ptr<float>();
      const auto run_short = [&](bool dispatch) {
        const Tensor out = poisoned({S.n_tokens, H, D});
        cuda_ops::AttentionParams q = sp;
        q.out = out.ptr<float>();
        if (dispatch) {
          cuda_ops::attention(q, stream);
        } else if (invariant) {
          q.min_q_len = -1;  // the one-launch kernel, as a mixed step runs it
          q.max_q_len = -1;
          cuda_ops::attention(q, stream);
        } else {
          cuda_ops::flash_prefill_wgmma_attention(q, stream);
        }
        return download(out);
      };
      const std::vector<float> a = run_short(true), b = run_short(false);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
          << "D " << D << (invariant ? ", batch-invariant" : "") << ": a short prompt-only step should run the "
          << (invariant ? "one-launch" : "wgmma") << " kernel";
    }
    const bool want_wgmma = !invariant;  // head_dim 64 and 128 alike
    const std::vector<float>& want = want_wgmma ? wg : mma;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
        << "D " << D << (invariant ? ", batch-invariant" : "") << ": attention() should run the "
        << (want_wgmma ? "wgmma" : "mma.sync") << " kernel";
    const double diff = rel_l2(wg, mma);
    EXPECT_LE(diff, 2e-2) << "D " << D;
    std::printf("  D %ld%s: attention() = %s kernel; wgmma vs mma.sync rel L2 %.2e\n", long(D),
                invariant ? " (batch-invariant)" : "", want_wgmma ? "wgmma" : "mma.sync", diff);
  }
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
