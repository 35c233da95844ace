// The streamed half-precision matvec (both consumers) (design: stream_half.cuh), and the stage-batched stream with SwiGLU fused into its output
// (stream_half_swiglu below).
#include "backends/cuda/matmul/stream_half.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/common/silu.cuh"
#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/matmul/stream_plan.cuh"
#include "backends/cuda/matmul/stream_store.cuh"
#include "backends/cuda/sm90/hopper.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

using streaming::block_rows;
using streaming::BlockRows;
using streaming::bulk_load;
using streaming::copy_policy;
using streaming::CopyPolicy;
using streaming::init_ring_barriers;
using streaming::kBarrierBytes;
using streaming::kConsumerWarps;
using streaming::kMaxStages;
using streaming::kThreads;
using streaming::StreamPlan;
using streaming::store_row;

constexpr int kSegVals = 256;  // one warp-wide 16-byte load: 32 lanes x 8 values

StreamPlan make_half_plan(int64_t rows, int64_t cols, int64_t grid) {
  return streaming::make_plan(rows, cols * 2, int(cols / kSegVals), grid);
}

// the stage-batched stream's instance for cols (a multiple of 256): kSegs = ceil(segments / 8) segments per warp (warps past the
// row's last segment load nothing for that j: 7168 columns are 28 segments, 4 for warps 0-3 and 3 for warps 4-7)
// and the plan's rows per stage (16 KB of whole rows: 4 at 1792-2048 columns, 2 at 2816-4096, else 1), when an
// instance for that pair is compiled; 0 otherwise.
int64_t batched_rows(int64_t cols) {
  return streaming::make_plan(1, cols * 2, int(cols / kSegVals), 1).rows_per_stage;
}

int batched_segs(int64_t cols) {
  if (cols < kSegVals || cols % kSegVals != 0 || cols > kStreamMaxCols) return 0;
  const int64_t k = (cols / kSegVals + kConsumerWarps - 1) / kConsumerWarps;
  const int64_t rows = batched_rows(cols);
  // The instances of launch_for_cols, (segments a warp, rows a stage): (1, 4), (2, 2), (2, 3) (Gemma's 2304 and 2560
  // columns), (3..8, 1).
  const bool instanced = k == 1 ? rows == 4 : k == 2 ? rows == 2 || rows == 3 : rows == 1;
  return instanced ? int(k) : 0;
}

size_t stream_smem_bytes(const StreamPlan& p, int64_t cols) {
  return size_t(kBarrierBytes) + size_t(p.stages) * size_t(p.rows_per_stage * cols * 2) +
         size_t(kConsumerWarps) * size_t(p.max_rows) * sizeof(float);
}

// Dot of 8 weights (one 16-byte chunk) with 8 activations, into two accumulators (shorter FMA chains).
template <class T>
__device__ __forceinline__ void dot8(const uint4& c, const float (&x)[8], float& a0, float& a1) {
  const uint32_t u[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float lo, hi;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      lo = __uint_as_float(u[i] << 16);
      hi = __uint_as_float(u[i] & 0xFFFF0000u);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
      lo = f.x;
      hi = f.y;
    }
    a0 = fmaf(lo, x[2 * i], a0);
    a1 = fmaf(hi, x[2 * i + 1], a1);
  }
}

// grid blocks; block b owns rows [r0, r0 + n_rows): rows / grid each, the first rows % grid blocks one more.
// Consumer warp w owns the 256-value segments w, w + 8, ... of every row (kSegs = ceil(segs_per_row / 8) of
// them): its activations for those columns live in registers for the whole kernel, so x is read once per
// block (after the PDL wait) and the ring's shared-memory reads are the only per-weight traffic.
//
// kRows = 0: the row-by-row stream's consumer, one row after the other. kRows > 0: the stage-batched stream's ("stage-batched"), for
// shapes where every warp has exactly kSegs segments of every row and a stage holds exactly kRows rows (the
// block's last stage fewer): all of a stage's 16-byte loads are issued first (kRows x kSegs per warp: 4 at 4096
// columns, 7 at 14336), the warp releases the slot right after them (the producer refills while the warp
// computes), the FMAs run in kRows independent pairs of chains and the kRows shuffle trees interleaved;
// stage and phase are counters. Why: in the row-by-row stream's SASS a row's segment loads
// are serialized behind the previous segment's FMAs and each row pays a 5-deep shuffle chain before the next
// row starts (~250 cycles a row): at 4096 columns (2 rows a 16 KB stage) the consumers need ~500 cycles a
// stage, only ~2x what the roofline allows, against ~3.7x at 14336 columns (docs/perf-log.md).
//
// kSwiglu (the stage-batched stream only): w is (2 hidden, cols), the rows of w_gate then those of w_up, and out is (1, hidden) =
// silu(x . w_gate^T) * (x . w_up^T). The block owns output units [r0, r0 + n_rows) of hidden; a stage holds
// kRows / 2 gate rows [u, u + kRows/2) then the same up rows [hidden + u, ...) (two bulk copies, one mbarrier),
// so unit j's two dot products land in the same block and the SwiGLU is applied where the block writes its
// outputs: no (1, 2 hidden) intermediate, no second launch. The partials are (warps, 2, max_rows): gate, then up.
template <class T, int kSegs, int kRows, bool kSwiglu = false>
__global__ void __launch_bounds__(kThreads, 1) matvec_stream_kernel(MatvecParams p, StreamPlan plan, int64_t grid) {
  static_assert(!kSwiglu || (kRows >= 2 && kRows % 2 == 0), "SwiGLU stages hold row pairs");
  constexpr int kPairs = kSwiglu ? kRows / 2 : kRows;  // output units per stage (the stage-batched stream)
  pdl_allow_dependents();
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);  // [stages]: a stage's bytes have landed
  uint64_t* empty = full + kMaxStages;                 // [stages]: every consumer warp is done with it
  const int64_t cols = p.w.cols;
  const int64_t stage_vals = plan.rows_per_stage * cols;
  T* ring = reinterpret_cast<T*>(smem + kBarrierBytes);                              // (stages, stage_vals)
  float* part = reinterpret_cast<float*>(ring + size_t(plan.stages) * size_t(stage_vals));  // (warps, max_rows)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t hidden = p.w.rows / 2;  // kSwiglu: output units
  const BlockRows br = block_rows(kSwiglu ? hidden : p.w.rows, grid, blockIdx.x);
  const int64_t r0 = br.first, n_rows = br.count;  // kSwiglu: output units, not weight rows
  const int64_t unit_per_stage = kSwiglu ? kPairs : plan.rows_per_stage;
  const int64_t n_stage = (n_rows + unit_per_stage - 1) / unit_per_stage;
  const int64_t part_stride = kSwiglu ? 2 * plan.max_rows : plan.max_rows;  // floats per warp of `part`

  if (threadIdx.x == 0) init_ring_barriers(full, empty, plan.stages, kConsumerWarps);
  __syncthreads();

  if (warp == kConsumerWarps) {  // producer: weights only, so it never waits for the previous kernel
    if (lane == 0) {
      // WeightStream::ring_inflight: stage g only once stage g - N has landed (waiting on its `full` barrier does
      // not change it; it cannot complete again before this producer refills the slot).
      const int64_t inflight = p.stream.ring_inflight;
      const int64_t cap = inflight > 0 && inflight < plan.stages ? inflight : 0;
      const CopyPolicy pol = copy_policy(p.stream);
      const auto wait_inflight = [&](int64_t g) {
        if (cap > 0 && g >= cap) sm90::mbar_wait(&full[(g - cap) % plan.stages], uint32_t((g - cap) / plan.stages) & 1u);
      };
      const T* src = reinterpret_cast<const T*>(p.w.data) + r0 * cols;
      if constexpr (kSwiglu) {
        const T* up = src + hidden * cols;  // w_up's rows of the same units
        for (int64_t g = 0; g < n_stage; ++g) {
          const int s = int(g % plan.stages);
          wait_inflight(g);
          sm90::mbar_wait(&empty[s], (uint32_t(g / plan.stages) & 1u) ^ 1u);
          const int64_t left = n_rows - g * kPairs;
          const int64_t units = left < kPairs ? left : kPairs;
          const uint32_t bytes = uint32_t(units * cols * int64_t(sizeof(T)));
          T* slot = ring + size_t(s) * size_t(stage_vals);
          sm90::mbar_arrive_expect_tx(&full[s], 2 * bytes);
          bulk_load(slot, src + g * kPairs * cols, bytes, &full[s], pol);
          bulk_load(slot + kPairs * cols, up + g * kPairs * cols, bytes, &full[s], pol);
        }
      } else {
        for (int64_t g = 0; g < n_stage; ++g) {
          const int s = int(g % plan.stages);
          wait_inflight(g);
          sm90::mbar_wait(&empty[s], (uint32_t(g / plan.stages) & 1u) ^ 1u);
          const int64_t left = n_rows - g * plan.rows_per_stage;
          const int64_t rows_here = left < plan.rows_per_stage ? left : plan.rows_per_stage;
          const uint32_t bytes = uint32_t(rows_here * cols * int64_t(sizeof(T)));
          sm90::mbar_arrive_expect_tx(&full[s], bytes);
          bulk_load(ring + size_t(s) * size_t(stage_vals), src + g * stage_vals, bytes, &full[s], pol);
        }
      }
    }
    return;
  }

  pdl_wait();  // x is written by the previous kernel
  float xr[kSegs][8];
#pragma unroll
  for (int j = 0; j < kSegs; ++j) {
    const int seg = j * kConsumerWarps + warp;
    if (seg < plan.segs_per_row) {
      const int64_t col = int64_t(seg) * kSegVals + lane * 8;
      const float4* xp = reinterpret_cast<const float4*>(p.x + col);
      const float4 a = xp[0], c = xp[1];
      xr[j][0] = a.x, xr[j][1] = a.y, xr[j][2] = a.z, xr[j][3] = a.w;
      xr[j][4] = c.x, xr[j][5] = c.y, xr[j][6] = c.z, xr[j][7] = c.w;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) xr[j][i] = 0.0f;
    }
  }

  if constexpr (kRows > 0) {  // the stage-batched stream
    int s = 0;
    uint32_t phase = 0;
    for (int64_t g = 0; g < n_stage; ++g) {
      sm90::mbar_wait(&full[s], phase);
      const int64_t left = n_rows - g * kPairs;
      const int rows_here = left < kPairs ? int(left) : kPairs;  // kSwiglu: units (row pairs) of this stage
      const T* st = ring + size_t(s) * size_t(stage_vals) + warp * kSegVals + lane * 8;
      uint4 c[kRows][kSegs];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int j = 0; j < kSegs; ++j) {
          // Segment j of this warp exists (warp-uniform; false only for the last j when segments % 8 != 0): a
          // load past the row would read the next row or slot (zero activations, but 0 x NaN is NaN).
          const bool live = j * kConsumerWarps + warp < plan.segs_per_row;
          c[r][j] = r % kPairs < rows_here && live
                        ? *reinterpret_cast<const uint4*>(st + r * cols + j * kConsumerWarps * kSegVals)
                        : make_uint4(0, 0, 0, 0);
        }
      }
      float v[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
        for (int j = 0; j < kSegs; ++j) dot8<T>(c[r][j], xr[j], a0, a1);
        v[r] = a0 + a1;
      }
      // The slot is free once every lane's loads are performed: __syncwarp orders them before lane 0's arrival,
      // whose release the producer's wait acquires before it refills the slot. (ptxas issues the arrival right
      // after the LDS.128s; the FMAs and the shuffles run while the producer refills.)
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(&empty[s]);
#pragma unroll
      for (int off = 16; off > 0; off /= 2) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) v[r] += __shfl_xor_sync(0xFFFFFFFFu, v[r], off);
      }
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          // kSwiglu: row r is gate (r < kPairs) or up (r >= kPairs) of unit g kPairs + r % kPairs.
          if (r % kPairs < rows_here)
            part[int64_t(warp) * part_stride + (r / kPairs) * plan.max_rows + g * kPairs + r % kPairs] = v[r];
        }
      }
      if (++s == plan.stages) {
        s = 0;
        phase ^= 1u;
      }
    }
  } else {  // the row-by-row stream
  for (int64_t g = 0; g < n_stage; ++g) {
    const int s = int(g % plan.stages);
    sm90::mbar_wait(&full[s], uint32_t(g / plan.stages) & 1u);
    const int64_t left = n_rows - g * plan.rows_per_stage;
    const int64_t rows_here = left < plan.rows_per_stage ? left : plan.rows_per_stage;
    const T* st = ring + size_t(s) * size_t(stage_vals);
    // One row after the other. Reducing a stage's rows side by side (8 unrolled row slots, independent FMA
    // chains and shuffle trees) was slower than this loop on every shape (docs/perf-log.md; not understood
    // yet: read the SASS before trying again).
    for (int64_t r = 0; r < rows_here; ++r) {
      float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
      for (int j = 0; j < kSegs; ++j) {
        const int seg = j * kConsumerWarps + warp;
        if (seg < plan.segs_per_row) {
          const uint4 c = *reinterpret_cast<const uint4*>(st + r * cols + int64_t(seg) * kSegVals + lane * 8);
          dot8<T>(c, xr[j], a0, a1);
        }
      }
      float v = a0 + a1;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
      if (lane == 0) part[int64_t(warp) * plan.max_rows + g * plan.rows_per_stage + r] = v;
    }
    __syncwarp();
    if (lane == 0) sm90::mbar_arrive(&empty[s]);
  }
  }
  streaming::consumers_sync();

  if constexpr (kSwiglu) {
    for (int64_t r = threadIdx.x; r < n_rows; r += kConsumerWarps * 32) {
      float g = 0.0f, u = 0.0f;
#pragma unroll
      for (int w = 0; w < kConsumerWarps; ++w) {
        g += part[int64_t(w) * part_stride + r];
        u += part[int64_t(w) * part_stride + plan.max_rows + r];
      }
      p.out[r0 + r] = silu_mul(g, u);
    }
  } else {
    for (int64_t r = threadIdx.x; r < n_rows; r += kConsumerWarps * 32) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kConsumerWarps; ++w) sum += part[int64_t(w) * plan.max_rows + r];
      store_row(p, r0 + r, sum + (p.bias ? p.bias[r0 + r] : 0.0f));
    }
  }
}

// the stage-batched stream with SwiGLU (stream_half_swiglu): the segments per warp kSegs = ceil(cols / 256 / 8) when an instance is
// compiled (1..4: up to 8192 columns), else 0. Its stage: kRows = 4 rows (2 units) at kSegs = 1, else 2 rows (1
// unit: a gate row and its up row; 16 KB at 4096 columns, the size the stage-batched stream's plan picks there).
int swiglu_segs(int64_t cols) {
  if (cols < kSegVals || cols % kSegVals != 0 || cols > kSwigluMaxCols) return 0;
  return int((cols / kSegVals + kConsumerWarps - 1) / kConsumerWarps);
}
int swiglu_stage_rows(int segs) { return segs == 1 ? 4 : 2; }

// The SwiGLU ring plan: rows_per_stage = the instance's kRows (gate rows + up rows), max_rows = units of the
// tallest block; grid = one block per SM over the hidden units.
StreamPlan make_swiglu_plan(int64_t hidden, int64_t cols, int64_t grid) {
  StreamPlan p{};
  p.rows_per_stage = swiglu_stage_rows(swiglu_segs(cols));
  const int64_t fit = streaming::kRingBytes / (p.rows_per_stage * cols * 2);
  p.stages = int(fit < kMaxStages ? fit : kMaxStages);
  p.segs_per_row = int(cols / kSegVals);
  p.max_rows = hidden / grid + (hidden % grid > 0 ? 1 : 0);
  return p;
}

size_t swiglu_smem_bytes(const StreamPlan& p, int64_t cols) {
  return size_t(kBarrierBytes) + size_t(p.stages) * size_t(p.rows_per_stage * cols * 2) +
         size_t(kConsumerWarps) * 2 * size_t(p.max_rows) * sizeof(float);
}

template <class T, int kSegs>
void launch_swiglu(const MatvecParams& p, int n_sms, cudaStream_t stream) {
  constexpr int kRows = kSegs == 1 ? 4 : 2;
  const int64_t hidden = p.w.rows / 2;
  const int64_t grid = streaming::stream_grid(hidden, n_sms);
  const StreamPlan plan = make_swiglu_plan(hidden, p.w.cols, grid);
  FERRY_CUDA_REQUIRE(plan.rows_per_stage == kRows);
  const size_t smem = streaming::one_block_per_sm(swiglu_smem_bytes(plan, p.w.cols));
  const auto kernel = matvec_stream_kernel<T, kSegs, kRows, true>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  launch_pdl(kernel, dim3(unsigned(grid)), dim3(kThreads), smem, stream, p, plan, grid);
  FERRY_CUDA_CHECK_LAUNCH(matvec_stream_kernel);
}

template <class T>
void launch_swiglu_for_cols(const MatvecParams& p, int n_sms, cudaStream_t stream) {
  switch (swiglu_segs(p.w.cols)) {
    case 1: launch_swiglu<T, 1>(p, n_sms, stream); break;
    case 2: launch_swiglu<T, 2>(p, n_sms, stream); break;
    case 3: launch_swiglu<T, 3>(p, n_sms, stream); break;
    case 4: launch_swiglu<T, 4>(p, n_sms, stream); break;
    default: FERRY_CUDA_REQUIRE(!"no SwiGLU matvec instance for these columns (swiglu_segs)");
  }
}

// Segments per warp per row, rounded up to the kernel instance: 1, 2, 4 or 8 (cols up to 16384).
int segs_bucket(int64_t cols) {
  const int64_t segs = (cols / kSegVals + kConsumerWarps - 1) / kConsumerWarps;
  return segs <= 1 ? 1 : segs <= 2 ? 2 : segs <= 4 ? 4 : 8;
}

template <class T, int kSegs, int kRows>
void launch_stream(const MatvecParams& p, int n_sms, cudaStream_t stream) {
  const int64_t grid = streaming::stream_grid(p.w.rows, n_sms);
  const StreamPlan plan = make_half_plan(p.w.rows, p.w.cols, grid);
  FERRY_CUDA_REQUIRE(kRows == 0 || plan.rows_per_stage == kRows);
  const size_t smem = streaming::one_block_per_sm(stream_smem_bytes(plan, p.w.cols));
  const auto kernel = matvec_stream_kernel<T, kSegs, kRows>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  launch_pdl(kernel, dim3(unsigned(grid)), dim3(kThreads), smem, stream, p, plan, grid);
  FERRY_CUDA_CHECK_LAUNCH(matvec_stream_kernel);
}

template <class T>
void launch_for_cols(const MatvecParams& p, int n_sms, StreamConsumer consumer, cudaStream_t stream) {
  if (consumer == StreamConsumer::kStageBatched) {
    switch (batched_segs(p.w.cols)) {
      case 1: launch_stream<T, 1, 4>(p, n_sms, stream); break;
      case 2:
        batched_rows(p.w.cols) == 3 ? launch_stream<T, 2, 3>(p, n_sms, stream) : launch_stream<T, 2, 2>(p, n_sms, stream);
        break;
      case 3: launch_stream<T, 3, 1>(p, n_sms, stream); break;
      case 4: launch_stream<T, 4, 1>(p, n_sms, stream); break;
      case 5: launch_stream<T, 5, 1>(p, n_sms, stream); break;
      case 6: launch_stream<T, 6, 1>(p, n_sms, stream); break;
      case 7: launch_stream<T, 7, 1>(p, n_sms, stream); break;
      case 8: launch_stream<T, 8, 1>(p, n_sms, stream); break;
      default: FERRY_CUDA_REQUIRE(!"no the stage-batched stream instance for these columns (batched_segs)");
    }
    return;
  }
  switch (segs_bucket(p.w.cols)) {
    case 1: launch_stream<T, 1, 0>(p, n_sms, stream); break;
    case 2: launch_stream<T, 2, 0>(p, n_sms, stream); break;
    case 4: launch_stream<T, 4, 0>(p, n_sms, stream); break;
    default: launch_stream<T, 8, 0>(p, n_sms, stream); break;
  }
}

}  // namespace

bool stream_half_supports(DType wtype, int n_tokens, int64_t rows, int64_t cols, int n_sms, size_t max_smem,
                            StreamConsumer consumer) {
  if (n_tokens != kStreamMaxTokens || rows < 1 || n_sms < 1) return false;
  if (wtype != DType::BF16 && wtype != DType::F16) return false;
  if (cols < kStreamColAlign || cols % kStreamColAlign != 0 || cols > kStreamMaxCols) return false;
  if (consumer == StreamConsumer::kStageBatched && batched_segs(cols) == 0) return false;
  const int64_t grid = streaming::stream_grid(rows, n_sms);
  const StreamPlan plan = make_half_plan(rows, cols, grid);
  return plan.stages >= 2 && stream_smem_bytes(plan, cols) <= max_smem;
}

bool stream_half_swiglu_supports(DType wtype, int n_tokens, int64_t weight_rows, int64_t cols, int n_sms,
                            size_t max_smem) {
  if (n_tokens != kStreamMaxTokens || n_sms < 1 || weight_rows < 2 || weight_rows % 2 != 0) return false;
  if ((wtype != DType::BF16 && wtype != DType::F16) || swiglu_segs(cols) == 0) return false;
  const int64_t hidden = weight_rows / 2;
  const StreamPlan plan = make_swiglu_plan(hidden, cols, streaming::stream_grid(hidden, n_sms));
  return plan.stages >= 2 && swiglu_smem_bytes(plan, cols) <= max_smem;
}

bool stream_half_swiglu_applies(DType wtype, int n_tokens, int64_t weight_rows, int64_t cols) {
  return stream_half_swiglu_supports(wtype, n_tokens, weight_rows, cols, streaming::device_sm_count(), streaming::device_max_smem());
}

void stream_half_swiglu(DType wtype, const MatvecParams& p, cudaStream_t stream) {
  const int n_sms = streaming::device_sm_count();
  FERRY_CUDA_REQUIRE(stream_half_swiglu_supports(wtype, p.n_tokens, p.w.rows, p.w.cols, n_sms, streaming::device_max_smem()));
  FERRY_CUDA_REQUIRE(p.bias == nullptr);
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w.data) % 16 == 0);
  if (wtype == DType::BF16) {
    launch_swiglu_for_cols<__nv_bfloat16>(p, n_sms, stream);
  } else {
    launch_swiglu_for_cols<__half>(p, n_sms, stream);
  }
}

bool stream_half_applies(DType wtype, int n_tokens, int64_t rows, int64_t cols, bool batched) {
  return stream_half_supports(wtype, n_tokens, rows, cols, streaming::device_sm_count(), streaming::device_max_smem(),
                                batched ? StreamConsumer::kStageBatched : StreamConsumer::kRowByRow);
}

void stream_half(DType wtype, const MatvecParams& p, StreamConsumer consumer, cudaStream_t stream) {
  const int n_sms = streaming::device_sm_count();
  FERRY_CUDA_REQUIRE(
      stream_half_supports(wtype, p.n_tokens, p.w.rows, p.w.cols, n_sms, streaming::device_max_smem(), consumer));
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w.data) % 16 == 0);
  if (wtype == DType::BF16) {
    launch_for_cols<__nv_bfloat16>(p, n_sms, consumer, stream);
  } else {
    launch_for_cols<__half>(p, n_sms, consumer, stream);
  }
}

}  // namespace ferry::cuda_ops
