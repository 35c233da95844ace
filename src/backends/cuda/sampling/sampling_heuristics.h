// How the sampler's streaming passes (pass 1, the nucleus histogram, the gather: sampling.cu) split each row of
// logits over blocks. Host code only.
//
// Rule: blocks of kSampleSplitThreads (256) threads; aim for kSampleBlocksPerSm (4) blocks a SM over the whole
// grid, so the grid fills the SMs once, in blocks small enough that an SM holding one more than another finishes
// at most a quarter of a block's walk later, and never in waves of huge blocks. parts = clamp(ceil(4 * n_sms /
// m), 1, kSamplePartsMax); a part is a whole number of gather tiles (kSampleGatherTile ids), so parts is then
// recomputed from the slice.
//
// Worked example, vocab 128256 (Llama 3: 125.25 tiles of 1024 ids) on the H200's 132 SMs, target 528 blocks:
//   m = 1:   528 -> 64 parts (the cap); slice ceil(2004 / 1024) = 2 tiles = 2048 ids -> 63 parts; 63 blocks, one
//            float4 load (two at most) per thread: latency-bound, ~1 round trip to memory.
//   m = 16:  33 parts; slice ceil(3887 / 1024) = 4 tiles = 4096 ids -> 32 parts; 512 blocks (3.9 a SM).
//   m = 64:  9 parts; slice ceil(14251 / 1024) = 14 tiles = 14336 ids -> 9 parts; 576 blocks (4.4 a SM), each
//            57 KB of logits, 14 float4 loads per thread in rounds of 4 in flight.
//   m = 256: 3 parts; slice 42 tiles = 43008 ids -> 3 parts; 768 blocks (5.8 a SM; 8 fit by threads, so all are
//            resident at once: no second wave).
// Before (2026-11-30): 32 parts of 1,024 threads at every split m; 64 rows were 2,048 such blocks in ~8 waves and
// ran 50 us against 26 us for one block a row (greedy, H200).
#pragma once

#include <algorithm>
#include <cstdint>

namespace ferry::cuda_ops {

inline constexpr int kSampleSplitThreads = 256;  // threads of a streaming pass's block
inline constexpr int kSampleGatherTile = 4 * kSampleSplitThreads;  // ids a streaming block walks a step (float4s)
inline constexpr int kSamplePartsMax = 64;       // parts a row at most (the partials' scratch)
inline constexpr int kSampleBlocksPerSm = 4;

// How a row is split: n_parts blocks, each over `slice` consecutive ids (a multiple of kSampleGatherTile; the
// last part may be shorter or, for tiny rows, empty).
struct SampleSplit {
  int32_t n_parts;
  int64_t slice;
};

inline SampleSplit plan_sample_split(int64_t m, int64_t vocab, int n_sms) {
  const int64_t target = int64_t(kSampleBlocksPerSm) * std::max(1, n_sms);
  const int64_t tiles = (vocab + kSampleGatherTile - 1) / kSampleGatherTile;
  int64_t parts = std::clamp<int64_t>((target + m - 1) / std::max<int64_t>(m, 1), 1, kSamplePartsMax);
  parts = std::min(parts, tiles);
  const int64_t slice = (tiles + parts - 1) / parts * kSampleGatherTile;
  return {.n_parts = int32_t((vocab + slice - 1) / slice), .slice = slice};
}

}  // namespace ferry::cuda_ops
