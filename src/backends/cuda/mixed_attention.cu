// The one-launch step attention (mixed_attention.cuh has the contract and the grid layout).
// Shared memory per block: the larger of the prefill tile's (Q tile + 2 stages of K/V tiles) and the decode
// ring, dynamic; the decode epilogue's and the ticket, static. Registers: the prefill tile's (~255 at D 128,
// 128 rows); both paths fit 2 blocks per SM.
#include "backends/cuda/mixed_attention.cuh"

#include <algorithm>
#include <cstdint>

#include "backends/cuda/common.cuh"
#include "backends/cuda/decode_mma_block.cuh"
#include "backends/cuda/decode_split.cuh"
#include "backends/cuda/flash_prefill_block.cuh"
#include "backends/cuda/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kWarps = prefill_detail::kWarps;
constexpr int kThreads = prefill_detail::kThreads;
static_assert(kWarps == decode_mma_detail::kWarps);
constexpr int kKeyTile = 64;  // prefill key positions per tile

template <int D>
constexpr int kDecodeStages = D == 64 ? DecodeSplitLimits::kMmaStages64 : DecodeSplitLimits::kMmaStages128;

template <int D, int MT>
constexpr size_t kDynSmem = std::max(prefill_detail::PrefillShape<D, MT, kKeyTile>::kSmemBytes,
                                     decode_mma_detail::MmaShape<D, kDecodeStages<D>>::kSmemBytes);

// Grid (n_slots + n_decode) blocks of kThreads; decode_first: the decode blocks take indices [0, n_decode).
// ticket: one i32 in the scratch, zero at launch and left at zero.
template <int D, int MT, int kM>
__global__ void __launch_bounds__(kThreads, 2)
    mixed_attention_kernel(AttentionParams p, DecodeSplitPlan plan, int n_slots, int n_decode, int decode_first) {
  pdl_allow_dependents();
  pdl_wait();
  constexpr int kStages = kDecodeStages<D>;
  constexpr int kTileQ = 64 * MT;
  extern __shared__ __align__(128) unsigned char smem[];  // prefill: Q + K/V stages; decode: the warps' rings
  __shared__ uint32_t s_valid[kWarps][kStages];            // decode: valid-row mask of each ring slot
  __shared__ DecodeEpilogueSmem<kM, kWarps> es;            // decode: the epilogue's
  __shared__ int s_ticket;                                 // prefill: this slot's current ticket

  const int b = int(blockIdx.x);
  const int d = decode_first ? b : b - n_slots;  // decode block index, if in [0, n_decode)
  if (d >= 0 && d < n_decode) {
    const int split = d % plan.n_splits, rest = d / plan.n_splits;
    decode_mma_detail::decode_mma_block<D, kM, kStages>(p, plan, split, rest % p.n_seqs, rest / p.n_seqs, smem,
                                                        s_valid, es);
    return;
  }
  // A prefill slot.
  const int n_items = prefill_detail::count_tiles(p, kTileQ) * p.n_heads;  // the same in every warp
  if (n_items == 0) return;  // no slot draws: the counter stays at zero
  int32_t* counter = reinterpret_cast<int32_t*>(p.scratch) + (DecodeSplitLimits::kMaxCounters - 1);
  const int last_draw = n_items + n_slots - 1;
  for (;;) {
    if (threadIdx.x == 0) {
      const int t = atomicAdd(counter, 1);
      if (t == last_draw) atomicExch(counter, 0);  // every slot has drawn its last ticket: ready for the next launch
      s_ticket = t;
    }
    __syncthreads();
    const int item = s_ticket;
    __syncthreads();  // every thread has read the ticket before thread 0 draws again
    if (item >= n_items) return;
    int s = 0, tile = 0;
    prefill_detail::find_tile(p, kTileQ, item / p.n_heads, s, tile);
    prefill_detail::flash_prefill_tile<D, MT, kKeyTile>(p, s, tile, item % p.n_heads, smem);  // ends synced
  }
}

int sm_count() {
  int dev = 0, n = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&dev));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

template <int D, int MT, int kM>
void launch_mixed(const AttentionParams& p, const DecodeSplitPlan& plan, int slots_per_sm, cudaStream_t stream) {
  constexpr int kTileQ = 64 * MT;
  constexpr size_t kSmem = kDynSmem<D, MT>;
  // Prefill items: n_heads per query tile; tiles <= n_tokens / kTileQ + n_seqs, and <= n_tokens / 2 (q_len >= 2).
  const int64_t max_tiles = std::min<int64_t>(p.n_tokens / 2, (int64_t(p.n_tokens) + kTileQ - 1) / kTileQ + p.n_seqs);
  const int64_t n_slots = std::min<int64_t>(max_tiles * p.n_heads, int64_t(slots_per_sm) * sm_count());
  const int64_t n_decode = int64_t(plan.n_splits) * p.n_seqs * p.n_kv_heads * plan.n_row_groups;
  FERRY_CUDA_REQUIRE(n_slots + n_decode <= int64_t(INT32_MAX));
  if (n_slots + n_decode == 0) return;
  const auto kernel = mixed_attention_kernel<D, MT, kM>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  const int decode_first = p.n_tokens <= p.n_seqs ? 1 : 0;  // no sequence has 2 rows or more unless some have 0
  launch_pdl(kernel, dim3(unsigned(n_slots + n_decode)), dim3(kThreads), kSmem, stream, p, plan, int(n_slots),
             int(n_decode), decode_first);
  FERRY_CUDA_CHECK_LAUNCH(mixed_attention_kernel);
}

template <int D, int MT>
void launch_rows(const AttentionParams& p, const DecodeSplitPlan& plan, int slots_per_sm, cudaStream_t stream) {
  if (plan.rows == 8) {
    launch_mixed<D, MT, 8>(p, plan, slots_per_sm, stream);
  } else {
    launch_mixed<D, MT, 16>(p, plan, slots_per_sm, stream);
  }
}

template <int D>
void launch_tiles(const AttentionParams& p, const DecodeSplitPlan& plan, const MixedAttentionConfig& c,
                  cudaStream_t stream) {
  if (c.tile_rows == 64) {
    launch_rows<D, 1>(p, plan, c.slots_per_sm, stream);
  } else {
    launch_rows<D, 2>(p, plan, c.slots_per_sm, stream);
  }
}

}  // namespace

bool mixed_attention_supports(const AttentionParams& p, const DecodeSplitPlan& plan) {
  if (p.head_dim != 64 && p.head_dim != 128) return false;
  if (plan.kernel != DecodeKernel::kTensorCores || (plan.rows != 8 && plan.rows != 16)) return false;
  if (plan.stages != mma_default_stages(p.head_dim) || plan.chunk % 16 != 0) return false;
  if (reinterpret_cast<uintptr_t>(p.out) % 16 != 0 || reinterpret_cast<uintptr_t>(p.q) % 16 != 0) return false;
  const int64_t units = int64_t(p.n_seqs) * p.n_kv_heads * plan.n_row_groups;
  return plan.n_splits == 1 || units <= DecodeSplitLimits::kMaxCounters - 1;  // the last counter is the ticket
}

void mixed_attention(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream,
                     const MixedAttentionConfig& config) {
  if (p.n_tokens == 0 || p.n_seqs == 0) return;
  FERRY_CUDA_REQUIRE(mixed_attention_supports(p, plan));
  FERRY_CUDA_REQUIRE(config.tile_rows == 64 || config.tile_rows == 128);
  FERRY_CUDA_REQUIRE(config.slots_per_sm == 1 || config.slots_per_sm == 2);
  FERRY_CUDA_REQUIRE(p.n_heads <= 65535 && p.n_kv_heads >= 1 && p.n_heads % p.n_kv_heads == 0);
  FERRY_CUDA_REQUIRE(plan.n_splits >= 1 && plan.n_splits <= DecodeSplitLimits::kMaxSplits && plan.chunk >= 1);
  FERRY_CUDA_REQUIRE(p.scratch != nullptr && p.scratch_bytes >= decode_split_scratch_bytes(p, plan));
  if (p.head_dim == 64) {
    launch_tiles<64>(p, plan, config, stream);
  } else {
    launch_tiles<128>(p, plan, config, stream);
  }
}

}  // namespace ferry::cuda_ops
