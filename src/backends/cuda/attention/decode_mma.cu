// Work of one block of decode_mma_kernel (the code: decode_mma_block.cuh; kWarps warps, kM = 8 or 16 mma rows = query heads of the group):
// the chunk [start, end) is cut into tiles of 16 positions; warp w takes tiles w, w + kWarps, ... . A tile's K
// and V rows (16 x D bf16 each) reach the warp's ring in shared memory by cp.async, 16 bytes per lane and
// copy, the 16-byte chunk c of row r stored at chunk c ^ (r & 7) (so ldmatrix's 8 rows of one chunk column
// hit 8 different bank groups); the copies of the next kStages - 1 tiles are in flight while one is
// computed. Per tile and warp:
//   S (kM x 16) = Q . K^T: D / 16 ldmatrix.x4 (K rows as the col-major B operand), 4 mma per 16 dims (Q hi
//                and lo, two 8-position n-tiles);
//   online softmax on the S fragments in fp32, log2 domain (scale * log2e folded into Q); a quad of lanes
//   holds one row's 16 positions, so a row max is two shuffles;
//   O (kM x D) += P . V: P (bf16 hi + lo) reused from the S fragments as the A operand, V by ldmatrix.trans,
//                4 mma per 16 dims.
// Positions past the end and keys in bad blocks are masked (a per-tile bit mask the issuing lanes vote and
// keep in shared memory). At the end the warps' (m, l, O) go through shared memory into decode_block_epilogue
// (decode_merge.cuh): the same warp merge, partials and last-block split merge as the CUDA-core kernel.
#include "backends/cuda/attention/decode_mma.cuh"

#include <cuda_bf16.h>

#include <cmath>

#include "backends/cuda/attention/attention_mma.cuh"
#include "backends/cuda/attention/decode_merge.cuh"
#include "backends/cuda/attention/decode_mma_block.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

using decode_mma_detail::decode_mma_block;
using decode_mma_detail::kThreads;
using decode_mma_detail::kTile;
using decode_mma_detail::kWarps;
using decode_mma_detail::MmaShape;

// kFused: the q/k/v epilogue inside (p.qkv set; decode_fused_qkv.cuh), with its ~10 KB of static shared memory.
// The block waits for the previous kernel itself (decode_mma_block's kOwnWait: the first tiles of old positions are
// requested before the wait when plan.early_kv), and its last block per unit may merge in one pass
// (plan.one_pass_merge).
template <int D, int kM, int kStages, bool kFused>
__global__ void __launch_bounds__(kThreads, MmaShape<D, kStages>::kMinBlocks)
    decode_mma_kernel(AttentionParams p, DecodeSplitPlan plan) {
  pdl_allow_dependents();
  extern __shared__ __align__(128) unsigned char smem_ring[];  // (kWarps, kStages, K (16, D) | V (16, D)) bf16
  __shared__ uint32_t s_valid[kWarps][kStages];                // valid-row mask of each ring slot
  __shared__ DecodeEpilogueSmem<kM, kWarps> es;
  if constexpr (kFused) {
    __shared__ decode_mma_detail::FusedQkvSmem<D, kM> fs;
    decode_mma_block<D, kM, kStages, true, true, true>(p, plan, int(blockIdx.x), int(blockIdx.y), int(blockIdx.z), smem_ring,
                                           s_valid, es, &fs);
  } else {
    decode_mma_block<D, kM, kStages, false, true, true>(p, plan, int(blockIdx.x), int(blockIdx.y), int(blockIdx.z),
                                                        smem_ring, s_valid, es);
  }
}

template <int D, int kM, int kStages>
void launch_mma(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream) {
  constexpr size_t kSmem = MmaShape<D, kStages>::kSmemBytes;
  const auto kernel = p.qkv != nullptr ? decode_mma_kernel<D, kM, kStages, true> : decode_mma_kernel<D, kM, kStages, false>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  const dim3 grid(unsigned(plan.n_splits), unsigned(p.n_seqs), unsigned(p.n_kv_heads * plan.n_row_groups));
  launch_pdl(kernel, grid, dim3(kThreads), kSmem, stream, p, plan);
  FERRY_CUDA_CHECK_LAUNCH(decode_mma_kernel);
}

template <int D, int kStages>
void launch_mma_rows(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream) {
  if (plan.rows == 8) {
    launch_mma<D, 8, kStages>(p, plan, stream);
  } else {
    launch_mma<D, 16, kStages>(p, plan, stream);
  }
}

template <int D>
void launch_mma_stages(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream) {
  if (plan.stages == 3) {
    launch_mma_rows<D, 3>(p, plan, stream);
  } else {
    launch_mma_rows<D, 6>(p, plan, stream);
  }
}

}  // namespace

bool decode_mma_supports(int head_dim) { return head_dim == 64 || head_dim == 128; }

size_t decode_mma_smem_bytes(int head_dim, int stages) { return size_t(kWarps) * stages * 2 * kTile * head_dim * 2; }

void decode_mma_attention(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream) {
  if (p.n_seqs == 0) return;
  FERRY_CUDA_REQUIRE(decode_mma_supports(p.head_dim) && plan.kernel == DecodeKernel::kTensorCores);
  FERRY_CUDA_REQUIRE(plan.rows == 8 || plan.rows == 16);
  FERRY_CUDA_REQUIRE(plan.stages == 3 || plan.stages == 6);
  FERRY_CUDA_REQUIRE(plan.chunk % kTile == 0);  // tiles of a chunk start at multiples of 16
  FERRY_CUDA_REQUIRE(attention_out_aligned(p) &&
                     (p.qkv != nullptr || reinterpret_cast<uintptr_t>(p.q) % 8 == 0));
  FERRY_CUDA_REQUIRE(p.qkv == nullptr || (p.positions != nullptr && p.inv_freq != nullptr && p.slots != nullptr &&
                                          p.k_cache_out != nullptr && p.v_cache_out != nullptr &&
                                          (p.q_norm == nullptr) == (p.k_norm == nullptr)));
  if (p.head_dim == 64) {
    launch_mma_stages<64>(p, plan, stream);
  } else {
    launch_mma_stages<128>(p, plan, stream);
  }
}

}  // namespace ferry::cuda_ops
