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

// The ring: most of what the partials leave of the SM's shared memory (version 10 keeps 112 KB). Here it must also
// cover each phase boundary: while the consumers wait at the grid barrier and then load and quantize the next
// activations (a few L2 round trips), the producer keeps streaming the next weight into it.
inline constexpr int64_t kRingBytes = 176 * 1024;
// A block takes at most this many times its even share of a weight's stages (dynamic scheduling: the stages go to
// whichever producer asks first, so blocks whose copies land sooner take more; the partials are sized for it).
inline constexpr int64_t kShareCap = 3;
// Stage headers: the first unit of each slot's stage (or -1: the weight is done), then the first unit of each of
// the block's stages of the current weight, in order (at most kMaxLocalStages).
inline constexpr int kMaxLocalStages = 256;
inline constexpr int64_t kHeaderBytes = (v7::kMaxStages + kMaxLocalStages) * 4;

// The most units of a weight of n_units units, per per stage, one block may take: kShareCap even shares, whole stages.
__host__ __device__ inline int64_t unit_cap(int64_t n_units, int64_t per, int64_t grid) {
  const int64_t share = (n_units + grid - 1) / grid;
  const int64_t cap = (kShareCap * share + per - 1) / per * per;
  return cap < n_units ? cap : (n_units + per - 1) / per * per;
}

struct Plan {
  int64_t slot_pitch;  // bytes per ring slot: the largest stage of the three weights
  int stages;          // ring depth
  int64_t part_rows;   // per-warp partials' height: the most units a block may take of any of the three weights
};

// E.g. Q4_0 4096 x 14336 at 132 SMs: stages of 8 rows x 2304 bytes (wo, gate|up: 4 units) and 2 x 8064 (down) ->
// pitch 18432, 9 stages (162 KB); caps 96 rows (wo, down) and 328 units (gate|up; 82 stages) -> part_rows 328,
// partials 8 x 2 x 328 x 4 = 21 KB. Q8_0: 4 x 4352 and 1 x 15232 -> 17408, 10 stages; gate|up stages of 2 units.
inline Plan make_plan(DType w, int64_t dim, int64_t hidden, int64_t grid) {
  const int rd = v10::stage_rows(w, dim), rh = v10::stage_rows(w, hidden);
  const int64_t d = rd * v10::quant_row_bytes(w, dim), h = rh * v10::quant_row_bytes(w, hidden);
  Plan p{};
  p.slot_pitch = d > h ? d : h;
  const int64_t fit = kRingBytes / p.slot_pitch;
  p.stages = int(fit < v7::kMaxStages ? fit : v7::kMaxStages);
  const int64_t caps[3] = {unit_cap(dim, rd, grid), unit_cap(hidden, rd / 2, grid), unit_cap(dim, rh, grid)};
  p.part_rows = caps[0] > caps[1] ? caps[0] : caps[1];
  p.part_rows = p.part_rows > caps[2] ? p.part_rows : caps[2];
  return p;
}

// Whether a block's stages of every weight fit the headers (a weight's cap / units per stage).
inline bool headers_fit(DType w, int64_t dim, int64_t hidden, int64_t grid) {
  const int rd = v10::stage_rows(w, dim), rh = v10::stage_rows(w, hidden);
  return unit_cap(dim, rd, grid) / rd < kMaxLocalStages && unit_cap(hidden, rd / 2, grid) / (rd / 2) < kMaxLocalStages &&
         unit_cap(dim, rh, grid) / rh < kMaxLocalStages;
}

// Barriers, stage headers, the ring, the partials (kConsumerWarps, 2, part_rows) f32.
inline size_t smem_bytes(const Plan& p) {
  return size_t(v7::kBarrierBytes) + size_t(kHeaderBytes) + size_t(p.stages) * size_t(p.slot_pitch) +
         size_t(v7::kConsumerWarps) * 2 * size_t(p.part_rows) * sizeof(float);
}

// One launch of the instance for p's shape (decode_ffn_q8.cu, decode_ffn_q4.cu).
void launch_q8(const DecodeFfnParams& p, const Plan& plan, int grid, size_t smem, cudaStream_t stream);
void launch_q4(const DecodeFfnParams& p, const Plan& plan, int grid, size_t smem, cudaStream_t stream);

}  // namespace ferry::cuda_ops::ffn
