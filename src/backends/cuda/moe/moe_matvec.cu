// moe_experts_matvec: block (row block, group g); group g is expert active[g] with its slots. A warp takes two weight
// rows of the expert at once (kW = 2 in warp_dot_rows): the gate and the up row of one unit (MoeEpilogue::GateUp),
// or rows 2w and 2w + 1 of the block's run (Store, SwiGlu), and dots them with up to kTokens<D> slots' activations
// at a time, so a routed expert's row is read once for all of its slots (a group larger than that rereads it from
// L2) and both rows' loads are in flight together.
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/common/silu.cuh"
#include "backends/cuda/moe/moe_dot.cuh"
#include "backends/cuda/moe/moe_experts.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kWarps = 8;
// Slots dotted per pass over a warp's two rows: 4 (a decode step's groups are mostly 1-2 slots; with 8, two rows'
// accumulators and activations spill at the 128 registers that two blocks an SM allow).
template <class D>
constexpr int kTokens = 4;

// Weight rows a block covers: one unit (gate and up row) per warp for GateUp, two rows per warp otherwise.
constexpr int64_t rows_per_block(bool gate_up) { return gate_up ? kWarps : 2 * kWarps; }

template <class D, bool kGateUp>
__global__ void __launch_bounds__(kWarps * 32, 2) experts_matvec_kernel(MoeExpertsParams p) {
  pdl_allow_dependents();
  pdl_wait();
  const int g = int(blockIdx.y);
  if (g >= p.counts[0]) return;
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  const int64_t first = kGateUp ? int64_t(blockIdx.x) * kWarps + warp : (int64_t(blockIdx.x) * kWarps + warp) * 2;
  if (first >= p.rows) return;
  const bool has_second = kGateUp || first + 1 < p.rows;  // Store / SwiGlu: the warp's second row exists
  const int e = p.active[g];
  const int32_t begin = p.offsets[e], end = p.offsets[e + 1];
  const MoeExpertWeight ew = p.experts[e];
  const WeightView wv{ew.data, p.rows, p.cols, ew.scales};
  WeightView w[2] = {wv, wv};
  if constexpr (kGateUp) {
    const MoeExpertWeight uw = p.up_experts[e];
    w[1] = WeightView{uw.data, p.rows, p.cols, uw.scales};
  }
  const int64_t row[2] = {first, kGateUp ? first : (has_second ? first + 1 : first)};
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
    float acc[2][kTok];
    warp_dot_rows<D, 2, kTok>(w, row, xrow, nb, acc);
FERRY_UNROLL
    for (int t = 0; t < kTok; ++t) {
      if (t >= nb || lane != t) continue;
      const size_t o = size_t(slot[t]) * size_t(p.rows) + size_t(first);
      if constexpr (kGateUp) {
        p.out[o] = silu_mul(acc[0][t], acc[1][t]);
      } else {
        const bool swiglu = p.epilogue == MoeEpilogue::SwiGlu;
        p.out[o] = swiglu ? silu_mul(p.gate[o], acc[0][t]) : acc[0][t];
        if (has_second) p.out[o + 1] = swiglu ? silu_mul(p.gate[o + 1], acc[1][t]) : acc[1][t];
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
  const bool gate_up = p.epilogue == MoeEpilogue::GateUp;
  const dim3 grid(grid_for(p.rows, int(rows_per_block(gate_up))), unsigned(p.max_groups));
  FERRY_CUDA_REQUIRE(visit_decoder(type, [&]<class D>() {
    launch_pdl(gate_up ? experts_matvec_kernel<D, true> : experts_matvec_kernel<D, false>, grid, dim3(kWarps * 32), 0,
               stream, p);
  }));
}

}  // namespace ferry::cuda_ops
