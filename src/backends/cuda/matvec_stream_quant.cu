// Matvec version 7 for Q8_0 / Q4_0 weights at one token: the half-precision kernel's design (matvec_stream.cuh)
// over the "quants then scales" layout (weight_layout.cuh).
//  - A block's rows are contiguous in both regions, so a ring stage (whole rows) is two bulk copies completing
//    one mbarrier: the stage's quant bytes [rows_here, nb x 32 or 16] and their fp16 scales [rows_here, nb].
//    With cols % 256 == 0 every size and address is a multiple of 16 (quant rows of 128+ bytes, scale rows
//    of cols / 16 bytes, the scales region 256-aligned): no padding.
//  - Segments: a warp-wide 8-byte load per lane = 256 quant bytes = 256 Q8_0 values (8 per lane, a quarter
//    block) or 512 Q4_0 values (half a block per lane: bytes 8h..8h+7 hold values 8h..8h+7 in their low
//    nibbles, 16+8h.. in their high ones). Warp w owns segments w, w + 8, ... of every row (as BF16's
//    256-value segments): 4096 columns are 16 / 8 segments, 14336 are 56 / 28, so the 8 warps share rows
//    evenly where 16-byte loads (512 / 1024 values) would leave warps idle (Q4_0 at 4096 columns: 4 of 8).
//  - Math as version 2 (matvec.cu's ChunkMath), activations fp32 in registers: Q8_0 byte q -> 1 + (q+128)/32768
//    by one PRMT, minus 1 + 128/32768 = q/32768 exactly; Q4_0 nibble q -> 0.5 + q/256 by one PRMT, the lane's
//    sum over its 16 activations subtracted per block: d (256 S - 136 Σx). Relative L2 vs the f32 reference
//    ~1e-6 (summation order only, plus Q4_0's cancellation as in version 2).
//  - Per row each lane stores its partial in a per-warp tile [8 rows, 33] (no per-row shuffle chain: at 4096
//    columns a Q4_0 row is 2.3 KB, one every ~140 cycles per SM at 4.3 TB/s, while a 5-shuffle reduction per
//    row costs ~130 cycles of latency on top of the loads and FMAs); after the stage each row's 32 partials
//    are summed by 4 lanes (8 each, then 2 shuffles) into the per-warp row partials, added in warp order at
//    the end: a fixed order, deterministic.
#include <cuda_fp16.h>

#include "backends/cuda/matvec_stream.cuh"
#include "backends/cuda/matvec_stream_plan.cuh"
#include "backends/cuda/matvec_stream_quant.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/weight_layout.cuh"

namespace ferry::cuda_ops::v7 {
namespace {

constexpr int kLaneBytes = 8;                // quant bytes per lane per segment (one 8-byte shared load)
constexpr int kSegBytes = 32 * kLaneBytes;   // quant bytes per warp-wide segment
constexpr int kTilePitch = 33;               // floats per row of a warp's lane-partial tile (conflict-free)
constexpr int kTileFloats = kMaxStageRows * kTilePitch;

template <DType W>
struct QuantShape;
template <>
struct QuantShape<DType::Q8_0> {
  static constexpr int kQBytes = 32;                          // quant bytes per 32-value block
  static constexpr int kSegVals = kSegBytes;                  // values per segment
  static constexpr int kLaneVals = 8;                         // values (activations in registers) per lane
  static constexpr int kBlocksPerSeg = kSegVals / kQBlock;    // 8: four lanes per block
};
template <>
struct QuantShape<DType::Q4_0> {
  static constexpr int kQBytes = 16;
  static constexpr int kSegVals = 2 * kSegBytes;              // 512
  static constexpr int kLaneVals = 16;
  static constexpr int kBlocksPerSeg = kSegVals / kQBlock;    // 16: two lanes per block
};

template <DType W>
constexpr int64_t quant_row_bytes(int64_t cols) {  // quants + fp16 scales of one row
  return cols / kQBlock * (QuantShape<W>::kQBytes + 2);
}

template <DType W>
StreamPlan make_quant_plan(int64_t rows, int64_t cols, int64_t grid) {
  return make_plan(rows, quant_row_bytes<W>(cols), int(cols / QuantShape<W>::kSegVals), grid);
}

size_t quant_smem_bytes(const StreamPlan& p, int64_t row_bytes) {
  return size_t(kBarrierBytes) + size_t(p.stages) * size_t(p.rows_per_stage * row_bytes) +
         size_t(kConsumerWarps) * size_t(p.max_rows) * sizeof(float) +
         size_t(kConsumerWarps) * size_t(kTileFloats) * sizeof(float);
}

// Q8_0: 8 quant bytes (q.x: values 0..3, q.y: 4..7 of the lane's run) against x (8 activations), block scale
// d (fp16 bits); returns acc + d Σ q x.
__device__ __forceinline__ float q8_lane(const uint2& q, uint16_t d, const float (&x)[8], float acc) {
  constexpr float kOffset = 1.0f + 128.0f / 32768.0f;
  const uint32_t u[2] = {q.x ^ 0x80808080u, q.y ^ 0x80808080u};  // q + 128 per byte
  float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const float v = __uint_as_float(__byte_perm(u[w], 0x803Fu, 0x4506u | (uint32_t(b) << 4))) - kOffset;
      if (b % 2 == 0) {
        s0 = fmaf(v, x[4 * w + b], s0);
      } else {
        s1 = fmaf(v, x[4 * w + b], s1);
      }
    }
  }
  return fmaf(__half2float(__ushort_as_half(d)) * 32768.0f, s0 + s1, acc);
}

// Q4_0 nibble q (byte b of `nibbles`, 0..15) -> the float 0.5 + q/256 (bits 16..19 under exponent 0x7E).
__device__ __forceinline__ float nibble_float(uint32_t nibbles, int b) {
  return __uint_as_float(__byte_perm(nibbles, 0x3Fu, 0x4055u | (uint32_t(b) << 8)));
}

// Q4_0: 8 quant bytes = half a block (low nibbles: x[0..7], high nibbles: x[8..15]); sum_x = Σ x[0..15].
// S = Σ (0.5 + q/256) x, so Σ q x = 256 S - 128 Σx and d Σ (q - 8) x = d (256 S - 136 Σx).
__device__ __forceinline__ float q4_lane(const uint2& q, uint16_t d, const float (&x)[16], float sum_x, float acc) {
  const uint32_t u[2] = {q.x, q.y};
  float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    const uint32_t lo = u[w] & 0x0F0F0F0Fu, hi = (u[w] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      s0 = fmaf(nibble_float(lo, b), x[4 * w + b], s0);
      s1 = fmaf(nibble_float(hi, b), x[8 + 4 * w + b], s1);
    }
  }
  return fmaf(__half2float(__ushort_as_half(d)), fmaf(256.0f, s0 + s1, -136.0f * sum_x), acc);
}

// grid blocks (block_rows); kSegs = segments per warp per row rounded up (x registers: kSegs x kLaneVals).
// p.w: quants [rows, nb x kQBytes] then at p.w.scales fp16 [rows, nb]; p.x (1, cols) f32; p.out (1, rows).
template <DType W, int kSegs>
__global__ void __launch_bounds__(kThreads, 1) quant_stream_kernel(MatvecParams p, StreamPlan plan, int64_t grid) {
  using Q = QuantShape<W>;
  pdl_allow_dependents();
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);  // [stages]: a stage's bytes have landed
  uint64_t* empty = full + kMaxStages;                 // [stages]: every consumer warp is done with it
  const int64_t cols = p.w.cols, nb = cols / kQBlock;
  const int64_t qrow = nb * Q::kQBytes, srow = nb * 2;  // bytes per row: quants, scales
  const int64_t stage_q = plan.rows_per_stage * qrow;   // a stage's quant bytes; its scales follow
  const int64_t stage_bytes = plan.rows_per_stage * (qrow + srow);
  // (stages, stage_bytes): per stage [rows_per_stage, qrow] quant bytes, then [rows_per_stage, nb] fp16 scales
  uint8_t* ring = smem + kBarrierBytes;
  float* part = reinterpret_cast<float*>(ring + size_t(plan.stages) * size_t(stage_bytes));  // (warps, max_rows)
  float* tiles = part + int64_t(kConsumerWarps) * plan.max_rows;  // (warps, kMaxStageRows, kTilePitch)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const BlockRows br = block_rows(p.w.rows, grid, blockIdx.x);
  const int64_t n_stage = (br.count + plan.rows_per_stage - 1) / plan.rows_per_stage;

  if (threadIdx.x == 0) init_ring_barriers(full, empty, plan.stages, kConsumerWarps);
  __syncthreads();

  if (warp == kConsumerWarps) {  // producer: weights only, so it never waits for the previous kernel
    if (lane == 0) produce_quant_stages(p.w, plan, br, split_row_bytes(W, cols), ring, full, empty);
    return;
  }

  pdl_wait();  // x is written by the previous kernel
  // This lane's activations of segment j (seg = j * 8 + warp): Q8_0 values seg*256 + lane*8 + [0, 8);
  // Q4_0 block seg*16 + lane/2, half h = lane % 2: values 8h + [0, 8) and 16 + 8h + [0, 8) of the block.
  float xr[kSegs][Q::kLaneVals];
  float xsum[kSegs];  // Q4_0: Σ of the lane's 16 activations of segment j
#pragma unroll
  for (int j = 0; j < kSegs; ++j) {
    const int seg = j * kConsumerWarps + warp;
    xsum[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < Q::kLaneVals; ++i) xr[j][i] = 0.0f;
    if (seg < plan.segs_per_row) {
      const float* base = p.x + int64_t(seg) * Q::kSegVals;
      const float* runs[2] = {nullptr, nullptr};
      if constexpr (W == DType::Q8_0) {
        runs[0] = base + lane * 8;
      } else {
        runs[0] = base + (lane / 2) * kQBlock + (lane % 2) * 8;
        runs[1] = runs[0] + 16;
      }
#pragma unroll
      for (int h = 0; h < Q::kLaneVals / 8; ++h) {
        const float4 a = reinterpret_cast<const float4*>(runs[h])[0], c = reinterpret_cast<const float4*>(runs[h])[1];
        xr[j][8 * h + 0] = a.x, xr[j][8 * h + 1] = a.y, xr[j][8 * h + 2] = a.z, xr[j][8 * h + 3] = a.w;
        xr[j][8 * h + 4] = c.x, xr[j][8 * h + 5] = c.y, xr[j][8 * h + 6] = c.z, xr[j][8 * h + 7] = c.w;
      }
      if constexpr (W == DType::Q4_0) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < Q::kLaneVals; ++i) s += xr[j][i];
        xsum[j] = s;
      }
    }
  }

  float* tile = tiles + warp * kTileFloats;  // (kMaxStageRows, kTilePitch): lane partials of a stage's rows
  const int red_row = lane / 4, red_part = lane % 4;  // the reduction: 4 lanes per row, 8 partials each
  for (int64_t g = 0; g < n_stage; ++g) {
    const int s = int(g % plan.stages);
    sm90::mbar_wait(&full[s], uint32_t(g / plan.stages) & 1u);
    const int64_t left = br.count - g * plan.rows_per_stage;
    const int rows_here = int(left < plan.rows_per_stage ? left : plan.rows_per_stage);
    const uint8_t* sq = ring + size_t(s) * size_t(stage_bytes);                // (rows_per_stage, qrow)
    const uint16_t* ss = reinterpret_cast<const uint16_t*>(sq + stage_q);    // (rows_per_stage, nb)
    // One row after the other (the loop shape of the half-precision kernel, rev 4).
    for (int r = 0; r < rows_here; ++r) {
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kSegs; ++j) {
        const int seg = j * kConsumerWarps + warp;
        if (seg < plan.segs_per_row) {
          const uint2 q = *reinterpret_cast<const uint2*>(sq + r * qrow + int64_t(seg) * kSegBytes + lane * kLaneBytes);
          const uint16_t d = ss[r * nb + int64_t(seg) * Q::kBlocksPerSeg + lane / (32 / Q::kBlocksPerSeg)];
          if constexpr (W == DType::Q8_0) {
            acc = q8_lane(q, d, xr[j], acc);
          } else {
            acc = q4_lane(q, d, xr[j], xsum[j], acc);
          }
        }
      }
      tile[r * kTilePitch + lane] = acc;
    }
    __syncwarp();  // every lane's ring reads are done and its partials are in the tile
    if (lane == 0) sm90::mbar_arrive(&empty[s]);
    float t = 0.0f;
    if (red_row < rows_here) {
#pragma unroll
      for (int i = 0; i < 8; ++i) t += tile[red_row * kTilePitch + red_part * 8 + i];
    }
    t += __shfl_xor_sync(0xFFFFFFFFu, t, 1);
    t += __shfl_xor_sync(0xFFFFFFFFu, t, 2);
    if (red_part == 0 && red_row < rows_here) part[int64_t(warp) * plan.max_rows + g * plan.rows_per_stage + red_row] = t;
    __syncwarp();  // the tile is read before the next stage overwrites it
  }
  consumers_sync();

  for (int64_t r = threadIdx.x; r < br.count; r += kConsumerWarps * 32) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kConsumerWarps; ++w) sum += part[int64_t(w) * plan.max_rows + r];
    p.out[br.first + r] = sum + (p.bias ? p.bias[br.first + r] : 0.0f);
  }
}

template <DType W, int kSegs>
void launch_quant(const MatvecParams& p, int n_sms, cudaStream_t stream) {
  const int64_t grid = stream_grid(p.w.rows, n_sms);
  const StreamPlan plan = make_quant_plan<W>(p.w.rows, p.w.cols, grid);
  const size_t smem = quant_smem_bytes(plan, quant_row_bytes<W>(p.w.cols));
  const auto kernel = quant_stream_kernel<W, kSegs>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  launch_pdl(kernel, dim3(unsigned(grid)), dim3(kThreads), smem, stream, p, plan, grid);
  FERRY_CUDA_CHECK_LAUNCH(quant_stream_kernel);
}

// Segments per warp per row, rounded up to the kernel instance: Q8_0 1, 2, 4, 8; Q4_0 1, 2, 4 (16384 columns).
template <DType W>
void launch_for_cols(const MatvecParams& p, int n_sms, cudaStream_t stream) {
  const int64_t segs = (p.w.cols / QuantShape<W>::kSegVals + kConsumerWarps - 1) / kConsumerWarps;
  if (segs <= 1) {
    launch_quant<W, 1>(p, n_sms, stream);
  } else if (segs <= 2) {
    launch_quant<W, 2>(p, n_sms, stream);
  } else if (segs <= 4 || W == DType::Q4_0) {
    launch_quant<W, 4>(p, n_sms, stream);
  } else {
    if constexpr (W == DType::Q8_0) launch_quant<W, 8>(p, n_sms, stream);
  }
}

}  // namespace

bool quant_stream_supports(DType wtype, int64_t rows, int64_t cols, int n_sms, size_t max_smem) {
  const int64_t seg_vals = wtype == DType::Q8_0 ? QuantShape<DType::Q8_0>::kSegVals
                         : wtype == DType::Q4_0 ? QuantShape<DType::Q4_0>::kSegVals
                                                : 0;
  if (seg_vals == 0 || rows < 1 || n_sms < 1) return false;
  if (cols < seg_vals || cols % seg_vals != 0 || cols > kStreamMaxCols) return false;
  const int64_t grid = stream_grid(rows, n_sms);
  const bool q8 = wtype == DType::Q8_0;
  const StreamPlan plan = q8 ? make_quant_plan<DType::Q8_0>(rows, cols, grid)
                             : make_quant_plan<DType::Q4_0>(rows, cols, grid);
  const int64_t row_bytes = q8 ? quant_row_bytes<DType::Q8_0>(cols) : quant_row_bytes<DType::Q4_0>(cols);
  return plan.stages >= 2 && quant_smem_bytes(plan, row_bytes) <= max_smem;
}

void quant_stream_launch(DType wtype, const MatvecParams& p, int n_sms, cudaStream_t stream) {
  FERRY_CUDA_REQUIRE(p.w.scales % 16 == 0);
  if (wtype == DType::Q8_0) {
    launch_for_cols<DType::Q8_0>(p, n_sms, stream);
  } else {
    FERRY_CUDA_REQUIRE(wtype == DType::Q4_0);
    launch_for_cols<DType::Q4_0>(p, n_sms, stream);
  }
}

}  // namespace ferry::cuda_ops::v7
