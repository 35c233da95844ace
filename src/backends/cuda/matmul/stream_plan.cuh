// The streamed matvecs' shared internals (the half-precision kernel, stream_half.cu, and the quantized one,
// stream_quant_kernel.cuh): the ring budget, how a weight is cut into ring stages, the bulk copy, the device
// queries. Design: stream_half.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/sm90/hopper.cuh"

namespace ferry::cuda_ops::streaming {

inline constexpr int kConsumerWarps = 8;
inline constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + one producer warp
inline constexpr int64_t kStageTarget = 16384;              // bytes a stage aims at (whole rows, at least one)
inline constexpr int kMaxStageRows = 8;                     // rows per stage at most
// Ring budget, one block per SM. A 100 KB ring with two blocks allowed per SM (so that the next matvec could
// fill its ring while this one drains) ran at 0.57-0.85x of this on every shape (matvec_bench, H200), most
// likely from blocks doubling up on some SMs while others idled, and 3 instead of 4 stages of 14336 columns.
inline constexpr int64_t kRingBytes = 112 * 1024;
// (A 192 KB ring, measured as "version 8", ran 0.88-1.0x of this: bytes in flight are not the limit.)
inline constexpr int kMaxStages = 16;
inline constexpr int kBarrierBytes = 256;  // full[kMaxStages], empty[kMaxStages] mbarriers

// How the row-by-row stream cuts a weight of rows whole rows of row_bytes bytes for grid blocks. Host and device agree.
struct StreamPlan {
  int64_t rows_per_stage;  // whole rows per ring stage
  int stages;              // ring depth
  int segs_per_row;        // column segments per row (a segment = one warp-wide load of the row)
  int64_t max_rows;        // rows of the tallest block (the partials' height)
};

inline StreamPlan make_plan(int64_t rows, int64_t row_bytes, int segs_per_row, int64_t grid) {
  StreamPlan p{};
  p.rows_per_stage = kStageTarget / row_bytes > 1 ? kStageTarget / row_bytes : 1;
  if (p.rows_per_stage > kMaxStageRows) p.rows_per_stage = kMaxStageRows;
  const int64_t stage_bytes = p.rows_per_stage * row_bytes;
  const int64_t fit = kRingBytes / stage_bytes;
  p.stages = int(fit < kMaxStages ? fit : kMaxStages);
  p.segs_per_row = segs_per_row;
  p.max_rows = rows / grid + (rows % grid > 0 ? 1 : 0);
  return p;
}

// One block per SM, or one per row when there are fewer rows than SMs.
inline int64_t stream_grid(int64_t rows, int n_sms) { return rows < n_sms ? rows : n_sms; }

// Block b of grid owns rows [first, first + count): rows / grid each, the first rows % grid blocks one more.
struct BlockRows {
  int64_t first, count;
};
__host__ __device__ inline BlockRows block_rows(int64_t rows, int64_t grid, int64_t b) {
  const int64_t per = rows / grid, extra = rows % grid;
  return {b * per + (b < extra ? b : extra), per + (b < extra ? 1 : 0)};
}

// Thread 0 of the block: the ring's barriers (full: the producer's one arrival plus the copy bytes; empty: one
// arrival per consumer warp), made visible to the async proxy. The caller syncs the block after it.
__device__ __forceinline__ void init_ring_barriers(uint64_t* full, uint64_t* empty, int stages, int consumer_warps) {
  for (int s = 0; s < stages; ++s) {
    sm90::mbar_init(&full[s], 1);
    sm90::mbar_init(&empty[s], uint32_t(consumer_warps));
  }
  sm90::fence_barrier_init();
}

// The L2 policy of a producer's weight copies (WeightStream::evict_first), made once per producer.
struct CopyPolicy {
  bool hint = false;    // false: plain copies (the L2's default policy)
  uint64_t policy = 0;  // from createpolicy, when hint
};
__device__ __forceinline__ CopyPolicy copy_policy(const WeightStream& ws) {
  return ws.evict_first ? CopyPolicy{true, sm90::l2_evict_first_policy()} : CopyPolicy{};
}

// One 1-D bulk copy global -> shared completing `bar`'s transaction count (bytes % 16 == 0, both 16-aligned), under
// `pol`'s L2 policy.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                          CopyPolicy pol = {}) {
  if (pol.hint) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n"
        ::"r"(sm90::smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(sm90::smem_addr(bar)), "l"(pol.policy)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
            sm90::smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(sm90::smem_addr(bar))
        : "memory");
  }
}

// Consumers only (the producer warp has returned): named barrier 1 over the 8 consumer warps.
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerWarps * 32) : "memory");
}

inline int device_sm_count() {
  int dev = 0, n = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&dev));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

inline size_t device_max_smem() {
  int dev = 0, n = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&dev));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return size_t(n);
}

// The dynamic shared memory a streaming block asks for, raised so that a second block never fits the same SM.
// The kernels assume one block per SM (the grid is the SM count, each block streams an equal share of the
// rows): a second block on one SM leaves another SM idle. Under PDL the blocks are placed while the previous
// kernel still holds part of the machine, so a kernel that could fit twice doubles up on the free SMs (version
// 7 with a 100 KB ring, 2 blocks per SM allowed, ran at 0.57-0.85x; docs/perf-log.md). Two blocks fit when
// 2 x (smem + reserved) <= per-SM memory: H200 228 KB, 1 KB reserved per block -> at least 113 KB + 16 bytes.
inline size_t one_block_per_sm(size_t smem) {
  int dev = 0, per_sm = 0, reserved = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&dev));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
  const size_t floor = size_t(per_sm) / 2 - size_t(reserved) + 16;
  return smem > floor ? smem : floor;
}

}  // namespace ferry::cuda_ops::streaming
