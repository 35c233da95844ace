// moe_experts_matvec: block (row block, group g); group g is expert active[g] with its slots; warp w takes weight
// row blockIdx.x * kWarps + w and dots it with up to kTokens<D> slots' activations at a time (warp_dot_rows), so a routed
// expert's row is read once for all of its slots (a group larger than that rereads it from L2).
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/common/silu.cuh"
#include "backends/cuda/moe/moe_dot.cuh"
#include "backends/cuda/moe/moe_experts.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kWarps = 8;
// Slots dotted per pass over a row: 8, or 4 for the decoders of 32+ values a chunk (8 spill registers there).
template <class D>
constexpr int kTokens = D::kVals >= 32 ? 4 : 8;

// kGateUp: the row of the up expert too (MoeEpilogue::GateUp), read after the gate row by the same warp.
template <class D, bool kGateUp>
__global__ void __launch_bounds__(kWarps * 32) experts_matvec_kernel(MoeExpertsParams p) {
  pdl_allow_dependents();
  pdl_wait();
  const int g = int(blockIdx.y);
  if (g >= p.counts[0]) return;
  const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= p.rows) return;
  const int e = p.active[g];
  const int32_t begin = p.offsets[e], end = p.offsets[e + 1];
  const MoeExpertWeight ew = p.experts[e];
  const WeightView w{ew.data, p.rows, p.cols, ew.scales};
  const int lane = int(threadIdx.x & 31);
  constexpr int kTok = kTokens<D>;
  for (int32_t b0 = begin; b0 < end; b0 += kTok) {
    const int nb = end - b0 < kTok ? end - b0 : kTok;
    int32_t slot[kTok];
    const float* xrow[kTok];
FERRY_UNROLL
    for (int t = 0; t < kTok; ++t) {
      slot[t] = p.slots[b0 + (t < nb ? t : 0)];
      xrow[t] = p.a + size_t(slot[t] / p.a_div) * size_t(p.cols);
    }
    float acc[kTok];
    warp_dot_rows<D, kTok>(w, row, xrow, nb, acc);
    if constexpr (kGateUp) {
      const MoeExpertWeight uw = p.up_experts[e];
      float up[kTok];
      warp_dot_rows<D, kTok>(WeightView{uw.data, p.rows, p.cols, uw.scales}, row, xrow, nb, up);
FERRY_UNROLL
      for (int t = 0; t < kTok; ++t)
        if (t < nb && lane == t) p.out[size_t(slot[t]) * size_t(p.rows) + size_t(row)] = silu_mul(acc[t], up[t]);
    } else {
FERRY_UNROLL
      for (int t = 0; t < kTok; ++t) {
        if (t < nb && lane == t) {
          const size_t o = size_t(slot[t]) * size_t(p.rows) + size_t(row);
          p.out[o] = p.epilogue == MoeEpilogue::SwiGlu ? silu_mul(p.gate[o], acc[t]) : acc[t];
        }
      }
    }
  }
}

}  // namespace

void moe_experts_matvec(DType type, const MoeExpertsParams& p, cudaStream_t stream) {
  if (p.max_groups == 0) return;
  FERRY_CUDA_REQUIRE(p.max_groups <= 65535 && p.rows > 0 && p.cols % 4 == 0 && p.a_div >= 1);
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.a) % 16 == 0);
  FERRY_CUDA_REQUIRE(p.epilogue != MoeEpilogue::SwiGlu || p.gate != nullptr);
  FERRY_CUDA_REQUIRE(p.epilogue != MoeEpilogue::GateUp || p.up_experts != nullptr);
  const dim3 grid(grid_for(p.rows, kWarps), unsigned(p.max_groups));
  const bool gate_up = p.epilogue == MoeEpilogue::GateUp;
  FERRY_CUDA_REQUIRE(visit_decoder(type, [&]<class D>() {
    launch_pdl(gate_up ? experts_matvec_kernel<D, true> : experts_matvec_kernel<D, false>, grid, dim3(kWarps * 32), 0,
               stream, p);
  }));
}

}  // namespace ferry::cuda_ops
