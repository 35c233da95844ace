// The decode FFN kernel's plan (design: decode_ffn.cuh): its compiled shapes, the ring shared by the three
// weights, the shared memory. Host and device agree.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cuda/decode_ffn.cuh"
#include "backends/cuda/matvec_stream_plan.cuh"
#include "backends/cuda/matvec_v10_plan.cuh"

namespace ferry::cuda_ops::ffn {

// The (dim, hidden) pairs compiled for each of Q8_0 and Q4_0 (each is one kernel of ~3 matvecs' code: keep the
// list short). Llama-3-8B / Mistral-7B: 4096 x 14336.
struct Shape {
  int64_t dim, hidden;
};
inline constexpr Shape kShapes[] = {{4096, 14336}};

constexpr bool shape_compiled(int64_t dim, int64_t hidden) {
  for (const Shape& s : kShapes)
    if (s.dim == dim && s.hidden == hidden) return true;
  return false;
}

// The ring: most of the SM's shared memory (version 10 keeps 112 KB). Here it must also cover each phase boundary:
// while the consumers wait at the grid barrier and then load and quantize the next activations (a few L2 round
// trips, ~2-4 us), the producer keeps streaming the next weight into it; 200 KB a SM x 132 SMs is ~6 us of HBM
// time at 4.30 TB/s, against 3.4 us for 112 KB.
inline constexpr int64_t kRingBytes = 200 * 1024;

struct Plan {
  int64_t slot_pitch;  // bytes per ring slot: the largest stage of the three weights
  int stages;          // ring depth
  int64_t part_rows;   // per-warp partials' height: the most rows (units) a block has in any of the three
};

// E.g. Q4_0 4096 x 14336: stages of 8 rows x 2304 bytes (wo, gate|up) and 2 x 8064 (down) -> pitch 18432, 11
// stages (198 KB); Q8_0: 4 x 4352 and 1 x 15232 -> 17408, 11 stages. part_rows at 132 SMs: ceil(14336 / 132) = 109.
inline Plan make_plan(DType w, int64_t dim, int64_t hidden, int64_t grid) {
  const int64_t d = v10::stage_rows(w, dim) * v10::quant_row_bytes(w, dim);
  const int64_t h = v10::stage_rows(w, hidden) * v10::quant_row_bytes(w, hidden);
  Plan p{};
  p.slot_pitch = d > h ? d : h;
  const int64_t fit = kRingBytes / p.slot_pitch;
  p.stages = int(fit < v7::kMaxStages ? fit : v7::kMaxStages);
  const int64_t rd = (dim + grid - 1) / grid, rh = (hidden + grid - 1) / grid;
  p.part_rows = rd > rh ? rd : rh;
  return p;
}

// Barriers, the ring, the partials (kConsumerWarps, 2, part_rows) f32.
inline size_t smem_bytes(const Plan& p) {
  return size_t(v7::kBarrierBytes) + size_t(p.stages) * size_t(p.slot_pitch) +
         size_t(v7::kConsumerWarps) * 2 * size_t(p.part_rows) * sizeof(float);
}

// One launch of the instance for p's shape (decode_ffn_q8.cu, decode_ffn_q4.cu).
void launch_q8(const DecodeFfnParams& p, const Plan& plan, int grid, size_t smem, cudaStream_t stream);
void launch_q4(const DecodeFfnParams& p, const Plan& plan, int grid, size_t smem, cudaStream_t stream);

}  // namespace ferry::cuda_ops::ffn
