// The one-launch step attention (mixed_attention.cuh has the contract and the grid layout).
// Shared memory per block: the larger of the prefill tile's (Q tile + 2 stages of K/V tiles) and the decode
// ring, dynamic; the decode epilogue's, the ticket's and the key-split flag, static. Registers: the prefill tile's
// (~255 at D 128, 128 rows); both paths fit 2 blocks per SM.
#include "backends/cuda/attention/mixed_attention.cuh"

#include <algorithm>
#include <cstdint>

#include "backends/cuda/attention/decode_mma_block.cuh"
#include "backends/cuda/attention/decode_split.cuh"
#include "backends/cuda/attention/flash_prefill.cuh"
#include "backends/cuda/attention/flash_prefill_block.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/sm90/pdl.cuh"

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

// Key splits of a launch: K = key_splits (1: none); scratch: where the splits' partials and counters are.
struct KeySplitArgs {
  prefill_detail::PrefillSplitScratch scratch;
  int32_t key_splits;
  int32_t min_tiles;
};

// Grid (n_slots + n_decode) blocks of kThreads; decode_first: the decode blocks take indices [0, n_decode).
// ticket: one i32 in the scratch, zero at launch and left at zero.
template <int D, int MT, int kM>
__global__ void __launch_bounds__(kThreads, 2)
    mixed_attention_kernel(AttentionParams p, DecodeSplitPlan plan, KeySplitArgs ks, int n_slots, int n_decode,
                           int decode_first) {
  pdl_allow_dependents();
  constexpr int kStages = kDecodeStages<D>;
  constexpr int kTileQ = 64 * MT;
  extern __shared__ __align__(128) unsigned char smem[];  // prefill: Q + K/V stages; decode: the warps' rings
  __shared__ uint32_t s_valid[kWarps][kStages];            // decode: valid-row mask of each ring slot
  __shared__ DecodeEpilogueSmem<kM, kWarps> es;            // decode: the epilogue's
  __shared__ int s_item[4];                                // prefill: this slot's ticket, sequence, tile, splits used
  __shared__ int s_last;                                   // prefill: this block merges its tile's key splits

  const int b = int(blockIdx.x);
  const int d = decode_first ? b : b - n_slots;  // decode block index, if in [0, n_decode)
  if (d >= 0 && d < n_decode) {
    // As the standalone decode kernel: the block waits for the previous kernel itself, after requesting its first
    // K/V tiles of old positions (plan.early_kv; decode_mma_block says why that is safe in a step), and its unit's
    // last block may merge in one pass (plan.one_pass_merge; the same bits either way).
    const int split = d % plan.n_splits, rest = d / plan.n_splits;
    decode_mma_detail::decode_mma_block<D, kM, kStages, false, true, true>(p, plan, split, rest % p.n_seqs,
                                                                          rest / p.n_seqs, smem, s_valid, es);
    return;
  }
  pdl_wait();  // a prefill slot reads q and the step's new K/V, written by the previous kernels
  // A prefill slot.
  const int n_tiles = prefill_detail::count_tiles(p, kTileQ);  // the same in every warp
  if (n_tiles == 0) return;  // no slot draws: the counter stays at zero
  const int n_split = ks.key_splits;
  const int n_items = n_tiles * p.n_heads * n_split;
  int32_t* counter = reinterpret_cast<int32_t*>(p.scratch) + (DecodeSplitLimits::kMaxCounters - 1);
  const int last_draw = n_items + n_slots - 1;
  for (;;) {
    if (threadIdx.x < 32) {  // warp 0 draws until it holds a ticket with work (split < its tile's splits) or the end
      const int lane = threadIdx.x;
      int t = 0, s = 0, tile = 0, n_used = 1;
      for (;;) {
        if (lane == 0) {
          t = atomicAdd(counter, 1);
          if (t == last_draw) atomicExch(counter, 0);  // every slot has drawn its last: ready for the next launch
        }
        t = __shfl_sync(prefill_detail::kFull, t, 0);
        if (t >= n_items) break;
        const int item = t / n_split;
        prefill_detail::find_tile(p, kTileQ, item / p.n_heads, s, tile);
        if (n_split == 1) break;
        n_used = item < ks.scratch.n_counters
                     ? key_split_count(prefill_detail::tile_geometry<kTileQ, kKeyTile>(p, s, tile).n_k_tiles, n_split,
                                       ks.min_tiles)
                     : 1;
        if (t % n_split < n_used) break;
      }
      if (lane == 0) {
        s_item[0] = t;
        s_item[1] = s;
        s_item[2] = tile;
        s_item[3] = n_used;
      }
    }
    __syncthreads();
    const int t = s_item[0], s = s_item[1], tile = s_item[2], n_used = s_item[3];
    __syncthreads();  // every thread has read the ticket before warp 0 draws again
    if (t >= n_items) return;
    const int item = t / n_split, split = t % n_split, h = item % p.n_heads;
    const prefill_detail::TileGeom tg = prefill_detail::tile_geometry<kTileQ, kKeyTile>(p, s, tile);
    const int j0 = key_split_begin(tg.n_k_tiles, n_used, split), j1 = key_split_begin(tg.n_k_tiles, n_used, split + 1);
    prefill_detail::TileAcc<D, MT> acc;
    prefill_detail::flash_prefill_walk<D, MT, kKeyTile>(p, tg, s, h, j0, j1, smem, acc);  // ends synced
    if (n_used == 1) {
      prefill_detail::write_tile_rows<D, MT>(p, tg, h, acc);  // the unsplit tile: flash_prefill_tile's bits
    } else {
      prefill_detail::finish_key_split<D, MT, kMaxKeySplits>(p, tg, h, split, n_used, ks.scratch,
                                                             ks.scratch.counters - item, acc, s_last);
    }
  }
}

int sm_count() {
  int dev = 0, n = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&dev));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

// The largest number of (query tile, head) items a launch can have, from host sizes: tiles <= n_tokens / kTileQ
// + n_seqs, and <= n_tokens / 2 (q_len >= 2).
int64_t max_items(const AttentionParams& p, int tile_rows) {
  return std::min<int64_t>(p.n_tokens / 2, (int64_t(p.n_tokens) + tile_rows - 1) / tile_rows + p.n_seqs) * p.n_heads;
}

// Decode units holding an arrival counter (counters [0, units)).
int64_t decode_counters(const AttentionParams& p, const DecodeSplitPlan& plan) {
  return plan.n_splits > 1 ? int64_t(p.n_seqs) * p.n_kv_heads * plan.n_row_groups : 0;
}

size_t round_up_256(size_t x) { return (x + 255) / 256 * 256; }

// Where the key splits' partials start: after the decode plan's region.
size_t split_offset(const AttentionParams& p, const DecodeSplitPlan& plan) {
  return round_up_256(decode_split_scratch_bytes(p, plan));
}

KeySplitArgs key_split_args(const AttentionParams& p, const DecodeSplitPlan& plan, const MixedAttentionConfig& c) {
  KeySplitArgs a{};
  a.key_splits = c.key_splits;
  a.min_tiles = c.min_split_key_tiles;
  if (c.key_splits == 1) return a;
  int32_t* counters = reinterpret_cast<int32_t*>(p.scratch);
  a.scratch.counters = counters + (DecodeSplitLimits::kMaxCounters - 2);  // item i: counters[kMaxCounters - 2 - i]
  a.scratch.n_counters = int32_t(DecodeSplitLimits::kMaxCounters - 1 - decode_counters(p, plan));
  a.scratch.acc = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(p.scratch) + split_offset(p, plan));
  a.scratch.ml = a.scratch.acc + int64_t(p.n_tokens) * p.n_heads * c.key_splits * p.head_dim;
  a.scratch.n_splits = c.key_splits;
  return a;
}

template <int D, int MT, int kM>
void launch_mixed(const AttentionParams& p, const DecodeSplitPlan& plan, const MixedAttentionConfig& c,
                  cudaStream_t stream) {
  constexpr int kTileQ = 64 * MT;
  constexpr size_t kSmem = kDynSmem<D, MT>;
  const int64_t n_slots = std::min<int64_t>(max_items(p, kTileQ) * c.key_splits, int64_t(c.slots_per_sm) * sm_count());
  const int64_t n_decode = int64_t(plan.n_splits) * p.n_seqs * p.n_kv_heads * plan.n_row_groups;
  FERRY_CUDA_REQUIRE(n_slots + n_decode <= int64_t(INT32_MAX));
  if (n_slots + n_decode == 0) return;
  const auto kernel = mixed_attention_kernel<D, MT, kM>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  const int decode_first = p.n_tokens <= p.n_seqs ? 1 : 0;  // no sequence has 2 rows or more unless some have 0
  launch_pdl(kernel, dim3(unsigned(n_slots + n_decode)), dim3(kThreads), kSmem, stream, p, plan,
             key_split_args(p, plan, c), int(n_slots), int(n_decode), decode_first);
  FERRY_CUDA_CHECK_LAUNCH(mixed_attention_kernel);
}

template <int D, int MT>
void launch_rows(const AttentionParams& p, const DecodeSplitPlan& plan, const MixedAttentionConfig& c,
                 cudaStream_t stream) {
  if (plan.rows == 8) {
    launch_mixed<D, MT, 8>(p, plan, c, stream);
  } else {
    launch_mixed<D, MT, 16>(p, plan, c, stream);
  }
}

template <int D>
void launch_tiles(const AttentionParams& p, const DecodeSplitPlan& plan, const MixedAttentionConfig& c,
                  cudaStream_t stream) {
  if (c.tile_rows == 64) {
    launch_rows<D, 1>(p, plan, c, stream);
  } else {
    launch_rows<D, 2>(p, plan, c, stream);
  }
}

}  // namespace

bool mixed_attention_supports(const AttentionParams& p, const DecodeSplitPlan& plan) {
  if (p.head_dim != 64 && p.head_dim != 128) return false;
  // Its prefill walk has no window or soft-cap (flash_prefill_walk's kWindowCap instance would double the kernel's
  // instances): such a step runs the prefill kernel, then the decode kernel.
  if (p.window > 0 || p.softcap > 0) return false;
  if (plan.kernel != DecodeKernel::kTensorCores || (plan.rows != 8 && plan.rows != 16)) return false;
  if (plan.stages != mma_default_stages(p.head_dim) || plan.chunk % 16 != 0) return false;
  if (!attention_out_aligned(p) || reinterpret_cast<uintptr_t>(p.q) % 16 != 0) return false;
  const int64_t units = int64_t(p.n_seqs) * p.n_kv_heads * plan.n_row_groups;
  return plan.n_splits == 1 || units <= DecodeSplitLimits::kMaxCounters - 1;  // the last counter is the ticket
}

bool mixed_key_splits_fit(const AttentionParams& p, const DecodeSplitPlan& plan, const MixedAttentionConfig& c) {
  if (c.key_splits <= 1) return true;
  const int64_t items = max_items(p, c.tile_rows);
  return items + decode_counters(p, plan) + 1 <= DecodeSplitLimits::kMaxCounters;
}

size_t mixed_attention_scratch_bytes(const AttentionParams& p, const DecodeSplitPlan& plan,
                                     const MixedAttentionConfig& c) {
  const size_t decode = decode_split_scratch_bytes(p, plan);
  if (c.key_splits <= 1) return decode;
  return split_offset(p, plan) +
         size_t(p.n_tokens) * size_t(p.n_heads) * size_t(c.key_splits) * size_t(p.head_dim + 2) * sizeof(float);
}

int mixed_key_splits(const AttentionParams& p, const DecodeSplitPlan& plan, int tile_rows, int n_sms) {
  constexpr int64_t kSplitItemsPerSm = 8;                      // the (tile, head, split) items aimed at per SM
  constexpr size_t kMaxSplitScratchBytes = size_t(64) << 20;  // the partials' scratch at most
  constexpr int kMinTiles = MixedAttentionConfig{}.min_split_key_tiles;
  if ((p.max_q_len >= 0 && p.max_q_len <= 1) || p.n_tokens <= p.n_seqs) return 1;  // decode-only, most likely
  const int64_t max_kv = int64_t(p.max_blocks_per_seq) * p.block_size;
  if ((max_kv + 63) / 64 < 2 * kMinTiles) return 1;  // no tile spans enough key tiles to split
  const int64_t items = (int64_t(p.n_tokens) + tile_rows - 1) / tile_rows * p.n_heads;
  if (items >= int64_t(2) * n_sms) return 1;  // the tiles alone fill a wave of 2 slots per SM
  int k = 1;
  while (k * 2 <= kMaxKeySplits && items * k * 2 <= kSplitItemsPerSm * n_sms) k *= 2;
  for (; k > 1; k /= 2) {
    const MixedAttentionConfig c{.tile_rows = tile_rows, .key_splits = k};
    if (mixed_key_splits_fit(p, plan, c) &&
        mixed_attention_scratch_bytes(p, plan, c) - split_offset(p, plan) <= kMaxSplitScratchBytes)
      break;
  }
  return k;
}

void mixed_attention(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream,
                     const MixedAttentionConfig& config) {
  if (p.n_tokens == 0 || p.n_seqs == 0) return;
  FERRY_CUDA_REQUIRE(mixed_attention_supports(p, plan));
  FERRY_CUDA_REQUIRE(config.tile_rows == 64 || config.tile_rows == 128);
  FERRY_CUDA_REQUIRE(config.slots_per_sm == 1 || config.slots_per_sm == 2);
  FERRY_CUDA_REQUIRE(config.key_splits >= 1 && config.key_splits <= kMaxKeySplits && config.min_split_key_tiles >= 1);
  FERRY_CUDA_REQUIRE(mixed_key_splits_fit(p, plan, config));
  FERRY_CUDA_REQUIRE(max_items(p, config.tile_rows) * config.key_splits <= int64_t(INT32_MAX) / 2);  // tickets: int
  FERRY_CUDA_REQUIRE(p.n_heads <= 65535 && p.n_kv_heads >= 1 && p.n_heads % p.n_kv_heads == 0);
  FERRY_CUDA_REQUIRE(flash_prefill_cache_fits(p));
  FERRY_CUDA_REQUIRE(plan.n_splits >= 1 && plan.n_splits <= DecodeSplitLimits::kMaxSplits && plan.chunk >= 1);
  FERRY_CUDA_REQUIRE(p.scratch != nullptr && p.scratch_bytes >= mixed_attention_scratch_bytes(p, plan, config));
  if (p.head_dim == 64) {
    launch_tiles<64>(p, plan, config, stream);
  } else {
    launch_tiles<128>(p, plan, config, stream);
  }
}

}  // namespace ferry::cuda_ops
