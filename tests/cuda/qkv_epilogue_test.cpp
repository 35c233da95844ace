// The fused projections' epilogues on the GPU against the CPU reference backend (the oracle, which runs
// rms_norm + rope + store_kv on the same values): qkv_epilogue for head_dim 64 and 128, GQA ratios 1 and 4,
// both RoPE orderings, full and partial rotation, with and without q/k norm, into a bf16 cache (the backend
// op) and an f32 cache (the launcher directly); swiglu_fused on its float4 and scalar paths.
// Tolerances (relative L2): q and the f32 k/v copies 1e-5 (fp32; only the RMSNorm's summation order and
// fma contraction differ); the bf16 cache 4e-3 against the f32 reference (bf16 keeps 8 significant bits:
// rounding error at most 2^-9 = 1.95e-3 per element); the f32 cache 1e-5; swiglu_fused 1e-5 (as swiglu).
#ifdef FERRY_HAS_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/cuda/attention/qkv_epilogue.cuh"
#include "cuda_test_util.h"
#include "formats/quant.h"

namespace ferry::test {
namespace {

struct EpilogueCase {
  int64_t head_dim, n_heads, n_kv_heads;
  RopeOrdering ordering;
  bool qk_norm;
  int64_t half;  // rotated pairs per head (head_dim/2: full rotation)
  int64_t n = 5;  // tokens
};

class CudaQkvEpilogue : public CudaOpsTest {
 protected:
  void run_case(const EpilogueCase& c, bool f32_cache) {
    const int64_t n = c.n, D = c.head_dim, H = c.n_heads, KVH = c.n_kv_heads, n_all = H + 2 * KVH;
    // Up to 5 tokens: 16 slots at hand-picked positions; more (a prompt step, several heads per warp in the
    // launcher's plan): n + 8 slots, token t in slot n + 7 - t, positions spread up to ~1e5.
    const int64_t block = 4, n_blocks = n <= 5 ? 4 : (n + 8 + block - 1) / block, n_slots = n_blocks * block;
    const std::string what = "D " + std::to_string(D) + " H " + std::to_string(H) + " KVH " + std::to_string(KVH) +
                             (c.ordering == RopeOrdering::Neox ? " neox" : " interleaved") +
                             (c.qk_norm ? " qk_norm" : "") + " half " + std::to_string(c.half) +
                             (f32_cache ? " f32 cache" : " bf16 cache");
    std::vector<float> qkv = random_floats(size_t(n * n_all * D), 7 + uint32_t(D + H + KVH), 2.0f);
    std::vector<int32_t> pos = {70000, 1, 17, 4095, 0};
    std::vector<int64_t> slots = {3, 0, 15, 8, 9};
    pos.resize(size_t(n));
    slots.resize(size_t(n));
    if (n > 5) {
      for (int64_t t = 0; t < n; ++t) {
        pos[size_t(t)] = int32_t((t * 7919) % 100003);
        slots[size_t(t)] = n + 7 - t;
      }
    }
    std::vector<float> inv(size_t(c.half));
    for (int64_t i = 0; i < c.half; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * double(i) / double(2 * c.half)));
    std::vector<float> qn = random_floats(size_t(D), 11, 0.5f), kn = random_floats(size_t(D), 12, 0.5f);
    for (float& x : qn) x += 1.0f;
    for (float& x : kn) x += 1.0f;

    // CPU reference: f32 caches prefilled with a sentinel, so untouched slots can be checked too.
    constexpr float kSentinel = 3.0f;  // exact in bf16
    const size_t cache_n = size_t(n_slots * KVH * D);
    std::vector<float> ref_q(size_t(n * H * D)), ref_kc(cache_n, kSentinel), ref_vc(cache_n, kSentinel);
    std::vector<float> ref_k(size_t(n * KVH * D)), ref_v(size_t(n * KVH * D));
    cpu_.qkv_epilogue({.qkv = host(DType::F32, {n, n_all, D}, qkv), .positions = host(DType::I32, {n}, pos),
                       .slots = host(DType::I64, {n}, slots), .inv_freq = host(DType::F32, {c.half}, inv),
                       .q_norm = c.qk_norm ? host(DType::F32, {D}, qn) : Tensor{},
                       .k_norm = c.qk_norm ? host(DType::F32, {D}, kn) : Tensor{}, .eps = 1e-6f,
                       .ordering = c.ordering, .q = host(DType::F32, {n, H, D}, ref_q),
                       .k_cache = host(DType::F32, {n_blocks, block, KVH, D}, ref_kc),
                       .v_cache = host(DType::F32, {n_blocks, block, KVH, D}, ref_vc),
                       .k_out = host(DType::F32, {n, KVH, D}, ref_k), .v_out = host(DType::F32, {n, KVH, D}, ref_v)});

    const Tensor g_qkv = upload(DType::F32, {n, n_all, D}, qkv);
    const Tensor g_pos = upload(DType::I32, {n}, pos), g_slots = upload(DType::I64, {n}, slots);
    const Tensor g_inv = upload(DType::F32, {c.half}, inv);
    const Tensor g_qn = upload(DType::F32, {D}, qn), g_kn = upload(DType::F32, {D}, kn);
    const Tensor g_q = poisoned({n, H, D}), g_k = poisoned({n, KVH, D}), g_v = poisoned({n, KVH, D});
    std::vector<float> got_kc(cache_n), got_vc(cache_n);
    if (!f32_cache) {
      std::vector<uint16_t> init(cache_n);
      quantize_row(DType::BF16, std::vector<float>(cache_n, kSentinel).data(), init.data(), int64_t(cache_n));
      const Tensor kc = upload(DType::BF16, {n_blocks, block, KVH, D}, init);
      const Tensor vc = upload(DType::BF16, {n_blocks, block, KVH, D}, init);
      gpu_->qkv_epilogue({.qkv = g_qkv, .positions = g_pos, .slots = g_slots, .inv_freq = g_inv,
                          .q_norm = c.qk_norm ? g_qn : Tensor{}, .k_norm = c.qk_norm ? g_kn : Tensor{}, .eps = 1e-6f,
                          .ordering = c.ordering, .q = g_q, .k_cache = kc, .v_cache = vc, .k_out = g_k, .v_out = g_v});
      std::vector<uint16_t> raw(cache_n);
      for (auto [t, out] : {std::pair{kc, &got_kc}, std::pair{vc, &got_vc}}) {
        gpu_->copy_to_host(raw.data(), t, raw.size() * 2);
        dequantize_row(DType::BF16, raw.data(), out->data(), int64_t(cache_n));
      }
    } else {
      const Tensor kc = upload(DType::F32, {n_blocks, block, KVH, D}, std::vector<float>(cache_n, kSentinel));
      const Tensor vc = upload(DType::F32, {n_blocks, block, KVH, D}, std::vector<float>(cache_n, kSentinel));
      const Tensor errs = upload(DType::I8, {64}, std::vector<int8_t>(64, 0));
      cuda_ops::qkv_epilogue({.qkv = g_qkv.ptr<float>(), .positions = g_pos.ptr<int32_t>(),
                              .slots = g_slots.ptr<int64_t>(), .inv_freq = g_inv.ptr<float>(),
                              .q_norm = c.qk_norm ? g_qn.ptr<float>() : nullptr,
                              .k_norm = c.qk_norm ? g_kn.ptr<float>() : nullptr, .q = g_q.ptr<float>(),
                              .k_cache = kc.data, .v_cache = vc.data, .k_out = g_k.ptr<float>(),
                              .v_out = g_v.ptr<float>(), .n = n, .n_heads = H, .n_kv_heads = KVH, .head_dim = D,
                              .half = c.half, .n_slots = n_slots, .eps = 1e-6f,
                              .interleaved = c.ordering == RopeOrdering::Interleaved,
                              .kv_type = cuda_ops::KvCacheType::F32,
                              .errors = static_cast<cuda_ops::DeviceErrors*>(errs.data)},
                             gpu_->stream());
      got_kc = download(kc);
      got_vc = download(vc);
      std::vector<int8_t> e(64);
      gpu_->copy_to_host(e.data(), errs, 64);
      EXPECT_EQ(std::count(e.begin(), e.end(), 0), 64) << what << ": a device error was reported";
    }
    EXPECT_LE(rel_l2(download(g_q), ref_q), 1e-5) << what;
    EXPECT_LE(rel_l2(download(g_k), ref_k), 1e-5) << what;
    EXPECT_LE(rel_l2(download(g_v), ref_v), 1e-5) << what;
    const double cache_tol = f32_cache ? 1e-5 : 4e-3;
    EXPECT_LE(rel_l2(got_kc, ref_kc), cache_tol) << what;
    EXPECT_LE(rel_l2(got_vc, ref_vc), cache_tol) << what;
    // Slots no token wrote keep their contents (the reference's sentinel is there too: check it is).
    const size_t row = size_t(KVH * D);
    for (int64_t s = 0; s < n_slots; ++s) {
      if (std::find(slots.begin(), slots.end(), s) != slots.end()) continue;
      EXPECT_EQ(got_kc[size_t(s) * row], kSentinel) << what << " slot " << s;
      EXPECT_EQ(got_vc[size_t(s) * row + row - 1], kSentinel) << what << " slot " << s;
    }
  }
};

TEST_F(CudaQkvEpilogue, MatchesCpuReference) {
  for (const int64_t D : {64, 128}) {
    for (const auto& [H, KVH] : std::vector<std::pair<int64_t, int64_t>>{{4, 4}, {8, 2}}) {
      for (const RopeOrdering o : {RopeOrdering::Interleaved, RopeOrdering::Neox}) {
        for (const bool norm : {false, true}) {
          for (const bool f32_cache : {false, true}) run_case({D, H, KVH, o, norm, D / 2}, f32_cache);
        }
      }
    }
  }
  // Partial rotation (rope_dims < head_dim): the last dims pass through unrotated.
  run_case({128, 8, 2, RopeOrdering::Neox, true, 32}, false);
  run_case({64, 4, 4, RopeOrdering::Interleaved, false, 16}, true);
}

// Llama-3-8B's decode shape (32 q heads, 8 KV heads, head_dim 128, one token) through the backend op.
TEST_F(CudaQkvEpilogue, DecodeShape) { run_case({128, 32, 8, RopeOrdering::Interleaved, false, 64, 1}, false); }

// Prompt-step token counts, where the launcher gives each warp several heads (600 tokens: 4 per warp, 3 block
// groups per token; 2048: all 12 of a token's head groups in one block on an H200).
TEST_F(CudaQkvEpilogue, PromptShapesWithSeveralHeadsPerWarp) {
  run_case({128, 32, 8, RopeOrdering::Neox, false, 64, 600}, false);
  run_case({128, 32, 8, RopeOrdering::Interleaved, true, 64, 2048}, true);
  run_case({64, 12, 4, RopeOrdering::Neox, true, 32, 777}, false);
}

// A slot outside the cache is reported (ferry::Error at the next synchronisation), not written.
TEST_F(CudaQkvEpilogue, BadSlotIsReported) {
  const int64_t D = 64, H = 2, KVH = 1;
  const std::vector<float> qkv = random_floats(size_t((H + 2 * KVH) * D), 5);
  const std::vector<float> inv(size_t(D / 2), 0.5f);
  const std::vector<int32_t> pos = {3};
  const std::vector<int64_t> slots = {99};
  const Tensor kc = upload(DType::BF16, {2, 4, KVH, D}, nullptr), vc = upload(DType::BF16, {2, 4, KVH, D}, nullptr);
  gpu_->qkv_epilogue({.qkv = upload(DType::F32, {1, H + 2 * KVH, D}, qkv), .positions = upload(DType::I32, {1}, pos),
                      .slots = upload(DType::I64, {1}, slots), .inv_freq = upload(DType::F32, {D / 2}, inv),
                      .ordering = RopeOrdering::Neox, .q = poisoned({1, H, D}), .k_cache = kc, .v_cache = vc});
  EXPECT_THROW(gpu_->synchronize(), Error);
}

TEST_F(CudaQkvEpilogue, SwigluFusedVectorAndScalarPaths) {
  for (const auto& [n, hidden] : std::vector<std::pair<int64_t, int64_t>>{{1, 14336}, {7, 1024}, {3, 75}, {2, 4}}) {
    std::vector<float> gu = random_floats(size_t(n * 2 * hidden), 40 + uint32_t(hidden), 4.0f);
    std::vector<float> ref(size_t(n * hidden));
    cpu_.swiglu_fused(host(DType::F32, {n, hidden}, ref), host(DType::F32, {n, 2 * hidden}, gu));
    const Tensor out = poisoned({n, hidden});
    gpu_->swiglu_fused(out, upload(DType::F32, {n, 2 * hidden}, gu));
    EXPECT_LE(rel_l2(download(out), ref), 1e-5) << "n " << n << " hidden " << hidden;
  }
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
