// moe_experts_gemm: block (weight-row tile n0 = blockIdx.x * kTileN, tile i = blockIdx.y of moe_group's list).
// Tile i is up to kTileM slots of one expert; per k-step the block stages their activation rows (kTileM x kTileK
// f32) and the expert's weight rows n0 .. n0 + kTileN decoded to f32 (moe_gemm_tile.cuh) in shared memory, then
// each of the 256 threads accumulates a 2 x 2 block of outputs in fp32, the k order fixed (the result of a slot
// does not depend on the other slots of its tile). Columns past cols and rows past the tile are zeros.
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/common/silu.cuh"
#include "backends/cuda/matmul/weight_layout.cuh"
#include "backends/cuda/moe/moe_experts.cuh"
#include "backends/cuda/moe/moe_gemm_tile.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kThreads = 256;
constexpr int kTileM = kMoeGemmTileM, kTileN = kMoeGemmTileN, kTileK = kMoeGemmTileK;
constexpr int kPad = kTileK + 1;  // smem row stride (floats): rows land in distinct banks
static_assert(kTileM == 32 && kTileN == 32 && kThreads == 256, "the 16 x 16 thread grid computes 2 x 2 each");

template <class D>
__global__ void __launch_bounds__(kThreads) experts_gemm_kernel(MoeExpertsParams p) {
  pdl_allow_dependents();
  pdl_wait();
  __shared__ float xs[kTileM][kPad];  // (kTileM, kTileK): the tile's activation rows, this k-step
  __shared__ float ws[kTileN][kPad];  // (kTileN, kTileK): the expert's weight rows, decoded
  __shared__ int32_t tile_slot[kTileM];
  const int i = int(blockIdx.y);
  if (i >= p.counts[1]) return;
  const int e = p.tile_expert[i];
  const int32_t begin = p.tile_begin[i], group_end = p.offsets[e + 1];
  const int m_count = group_end - begin < kTileM ? group_end - begin : kTileM;
  const int64_t n0 = int64_t(blockIdx.x) * kTileN;
  const MoeExpertWeight ew = p.experts[e];
  const WeightView w{ew.data, p.rows, p.cols, ew.scales};
  const int tid = int(threadIdx.x);
  if (tid < kTileM) tile_slot[tid] = tid < m_count ? p.slots[begin + tid] : -1;
  const int ty = tid / 16, tx = tid % 16;
  float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  const int64_t n_chunks = D::chunks(p.cols);
  for (int64_t k0 = 0; k0 < p.cols; k0 += kTileK) {
    __syncthreads();  // the previous step's reads are done (and tile_slot is written, the first time)
    for (int idx = tid; idx < kTileM * kTileK; idx += kThreads) {
      const int m = idx / kTileK, kk = idx % kTileK;
      const int32_t s = tile_slot[m];
      const int64_t col = k0 + kk;
      xs[m][kk] = s >= 0 && col < p.cols ? p.a[size_t(s / p.a_div) * size_t(p.cols) + size_t(col)] : 0.0f;
    }
    for (int idx = tid; idx < kTileN * MoeTile<D>::kChunks; idx += kThreads) {
      const int nn = idx / MoeTile<D>::kChunks, cc = idx % MoeTile<D>::kChunks;
      const int64_t row = n0 + nn, c = MoeTile<D>::chunk(k0, cc);
      float v[D::kVals];
      if (row < p.rows && c < n_chunks) {
        D::decode(D::load(w, row, c), v);
      } else {
FERRY_UNROLL
        for (int q = 0; q < D::kVals; ++q) v[q] = 0.0f;
      }
FERRY_UNROLL
      for (int r = 0; r < D::kRuns; ++r)
FERRY_UNROLL
        for (int j = 0; j < D::kRunLen; ++j) ws[nn][MoeTile<D>::column(k0, cc, r, j)] = v[r * D::kRunLen + j];
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kTileK; ++kk) {
      const float a0 = xs[ty][kk], a1 = xs[ty + 16][kk];
      const float b0 = ws[tx][kk], b1 = ws[tx + 16][kk];
      acc[0][0] = fmaf(a0, b0, acc[0][0]);
      acc[0][1] = fmaf(a0, b1, acc[0][1]);
      acc[1][0] = fmaf(a1, b0, acc[1][0]);
      acc[1][1] = fmaf(a1, b1, acc[1][1]);
    }
  }
FERRY_UNROLL
  for (int mi = 0; mi < 2; ++mi) {
    const int m = ty + 16 * mi;
    if (m >= m_count) continue;
    const int32_t s = tile_slot[m];
FERRY_UNROLL
    for (int nj = 0; nj < 2; ++nj) {
      const int64_t n = n0 + tx + 16 * nj;
      if (n >= p.rows) continue;
      const size_t o = size_t(s) * size_t(p.rows) + size_t(n);
      p.out[o] = p.epilogue == MoeEpilogue::SwiGlu ? silu_mul(p.gate[o], acc[mi][nj]) : acc[mi][nj];
    }
  }
}

}  // namespace

void moe_experts_gemm(DType type, const MoeExpertsParams& p, cudaStream_t stream) {
  if (p.max_groups == 0) return;
  FERRY_CUDA_REQUIRE(p.max_groups <= 65535 && p.rows > 0 && p.cols > 0 && p.a_div >= 1);
  FERRY_CUDA_REQUIRE(p.epilogue == MoeEpilogue::Store || (p.epilogue == MoeEpilogue::SwiGlu && p.gate != nullptr));
  const dim3 grid(grid_for(p.rows, kTileN), unsigned(p.max_groups));
  FERRY_CUDA_REQUIRE(visit_decoder(type, [&]<class D>() { launch_pdl(experts_gemm_kernel<D>, grid, dim3(kThreads), 0, stream, p); }));
}

}  // namespace ferry::cuda_ops
