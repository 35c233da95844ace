// GPU sampling (design: sampling.cuh). The streaming passes (pass 1, the nucleus histogram, the gather) run over
// blocks of kSampleSplitThreads, a row split as sampling_heuristics.h plans; the draw runs in one block of
// kSampleThreads a row, whose one-block path walks the row in tiles of kSampleThreads consecutive ids (coalesced
// 4-byte reads; the row stays in L2 between passes).
#include "backends/cuda/sampling/sampling.cuh"

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kT = kSampleThreads;
constexpr int kW = kT / 32;

struct SampleSmem {
  double mass[256];     // radix pass: weight per digit
  uint32_t count[256];  // radix pass: entries per digit
  double red_d[kW];     // block reductions / scans: one value per warp
  uint32_t red_u[kW];
  int64_t red_l[kW];
  double scan_base;     // scan_find: mass before the current tile
  int32_t found;        // scan_find: the id found, -1 before
  uint32_t digit;       // radix pass: the chosen digit, 256 when none
  double before;        // radix pass: mass (or count) ranked before the current prefix
  // the nucleus path's decisions (draw_nucleus), broadcast from thread 0
  double total, target, tol;
  NucleusCross cross;
  NucleusKeep keep;
  uint32_t n_cross;     // members of the crossing bucket
};

__device__ double block_sum(double v, SampleSmem& s) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) s.red_d[threadIdx.x / 32] = v;
  __syncthreads();
  double t = 0.0;
  for (int w = 0; w < int(blockDim.x / 32); ++w) t += s.red_d[w];  // same order in every thread
  return t;
}

// Max of (key << 32 | ~id) over the block: the largest key, ties -> lowest id.
__device__ int64_t block_max(int64_t v, SampleSmem& s) {
  for (int o = 16; o > 0; o /= 2) {
    const int64_t u = __shfl_xor_sync(0xFFFFFFFFu, v, o);
    v = u > v ? u : v;
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) s.red_l[threadIdx.x / 32] = v;
  __syncthreads();
  int64_t m = s.red_l[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) m = s.red_l[w] > m ? s.red_l[w] : m;
  return m;
}

// The first id i (ascending) where the running sum of value(i) over ids <= i reaches target (kStrict: exceeds
// it); -1 when it never does. value(i) >= 0. Walks tiles until the crossing one.
template <bool kStrict, class F>
__device__ int32_t scan_find(int64_t vocab, double target, F&& value, SampleSmem& s) {
  if (threadIdx.x == 0) {
    s.scan_base = 0.0;
    s.found = -1;
  }
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t t0 = 0; t0 < vocab; t0 += kT) {
    const int64_t i = t0 + threadIdx.x;
    const double v = i < vocab ? value(i) : 0.0;
    double incl = v;  // warp inclusive scan
    for (int o = 1; o < 32; o *= 2) {
      const double u = __shfl_up_sync(0xFFFFFFFFu, incl, o);
      if (lane >= o) incl += u;
    }
    double excl = __shfl_up_sync(0xFFFFFFFFu, incl, 1);  // the previous lane's inclusive sum, exactly
    if (lane == 0) excl = 0.0;
    if (lane == 31) s.red_d[warp] = incl;
    __syncthreads();
    double before = s.scan_base;
    for (int w = 0; w < warp; ++w) before += s.red_d[w];
    // prev is computed exactly as the previous id's cum (also across warps and tiles), so one id crosses first.
    const double cum = before + incl, prev = before + excl;
    const bool hit = kStrict ? cum > target : cum >= target;
    const bool hit_prev = kStrict ? prev > target : prev >= target;
    if (i < vocab && hit && !hit_prev) s.found = int32_t(i);
    __syncthreads();
    if (s.found >= 0) break;
    if (threadIdx.x == 0) {
      double t = s.scan_base;
      for (int w = 0; w < kW; ++w) t += s.red_d[w];
      s.scan_base = t;
    }
    __syncthreads();
  }
  const int32_t r = s.found;
  __syncthreads();
  return r;
}

// Radix select over 32-bit keys, best (largest) first: among ids with in(i) and key(i) != 0, the key T at
// which the running `measure` (1 per entry, or its weight) of all larger keys plus T's own first reaches
// target. *before = the measure of keys > T. Returns 0 when the total never reaches target.
// warp_hist: (kW, 256) f64 dynamic shared memory, one histogram per warp. One histogram for the block, added
// to with shared-memory atomics, was slow at a 128K vocabulary (docs/perf-log.md): the first
// pass's digit is the key's sign and exponent, shared by nearly every logit, so ~128K atomics (a CAS loop for
// f64) hit two or three words. Now a warp's lanes with the same digit are added up with shuffles and one lane
// writes the sum into the warp's own histogram (no atomics), and the histograms are added in warp order.
template <class In, class Key, class Measure>
__device__ uint32_t radix_select(int64_t vocab, double target, In&& in, Key&& key, Measure&& measure,
                                 SampleSmem& s, double* warp_hist, double* before_out) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double* wh = warp_hist + warp * 256;
  uint32_t prefix = 0, mask = 0;
  if (threadIdx.x == 0) s.before = 0.0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = lane; d < 256; d += 32) wh[d] = 0.0;
    __syncwarp();
    for (int64_t i0 = int64_t(warp) * 32; i0 < vocab; i0 += kT) {  // warp-uniform trip count
      const int64_t i = i0 + lane;
      uint32_t k = 0;
      if (i < vocab && in(i)) k = key(i);
      const bool act = k != 0 && (k & mask) == prefix;
      const uint32_t digit = (k >> shift) & 255u;
      const double v = act ? measure(i) : 0.0;
      const unsigned peers = __match_any_sync(0xFFFFFFFFu, act ? digit : 0xFFFFFFFFu);
      const bool solo = act && __popc(peers) == 1;
      if (solo) wh[digit] += v;  // no other lane of the warp has this digit
      // Groups of two or more lanes: their leaders (lowest lane) add the group's sum, one group at a time.
      unsigned leaders = __ballot_sync(0xFFFFFFFFu, act && !solo && lane == __ffs(peers) - 1);
      while (leaders != 0u) {
        const int leader = __ffs(leaders) - 1;
        const unsigned group = __shfl_sync(0xFFFFFFFFu, peers, leader);
        double x = (group >> lane) & 1u ? v : 0.0;
        for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xFFFFFFFFu, x, o);
        if (lane == leader) wh[digit] += x;
        leaders &= leaders - 1u;
      }
      __syncwarp();  // this iteration's histogram writes are visible to every lane before the next one's
    }
    __syncthreads();
    for (int d = threadIdx.x; d < 256; d += kT) {
      double t = 0.0;
      for (int w = 0; w < kW; ++w) t += warp_hist[w * 256 + d];
      s.mass[d] = t;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double b = s.before;
      uint32_t digit = 256;
      for (int d = 255; d >= 0; --d) {
        if (b + s.mass[d] >= target) {
          digit = uint32_t(d);
          break;
        }
        b += s.mass[d];
      }
      s.digit = digit;
      if (digit < 256) s.before = b;
    }
    __syncthreads();
    const uint32_t digit = s.digit;
    __syncthreads();
    if (digit == 256) return 0;
    prefix |= digit << shift;
    mask |= 255u << shift;
  }
  *before_out = s.before;
  __syncthreads();
  return prefix;
}

// A row's part of SampleParams::cand (sample_rows_cand_row_bytes): the top-k histogram, the nucleus histogram, the
// gathered count, the per-tile table, the candidates as (~key << 32 | id): ascending order is rank order (largest
// key first, ties by ascending id).
struct CandRow {
  uint32_t* hist;      // [kSampleBins] top-k rows: candidates per key >> 20
  uint64_t* mass;      // [kSampleBuckets] nucleus rows: survivors' fixed32 mass per weight bucket
  uint32_t* nhist;     // [kSampleBuckets] nucleus rows: survivors per weight bucket
  uint32_t* count;     // candidates gathered
  uint2* tiles;        // [sample_cand_tiles(vocab)] per gather tile: (offset of its candidates, their count)
  uint64_t* cand;      // [kSampleNucleusMax]; a tile's candidates are contiguous and in id order
};
__device__ CandRow cand_row(const SampleParams& p, int64_t row) {
  uint8_t* base = static_cast<uint8_t*>(p.cand) + size_t(row) * sample_rows_cand_row_bytes(p.vocab);
  uint8_t* tiles = base + size_t(kSampleBins) * 4 + size_t(kSampleBuckets) * 12 + 16;
  return {reinterpret_cast<uint32_t*>(base), reinterpret_cast<uint64_t*>(base + kSampleBins * 4),
          reinterpret_cast<uint32_t*>(base + kSampleBins * 4 + kSampleBuckets * 8),
          reinterpret_cast<uint32_t*>(base + kSampleBins * 4 + kSampleBuckets * 12), reinterpret_cast<uint2*>(tiles),
          reinterpret_cast<uint64_t*>(tiles + (sample_cand_tiles(p.vocab) * 8 + 15) / 16 * 16)};
}

// A row's part of SampleParams::parts: per part of the split, the max of (key << 31 | ~id), the candidate count
// and (nucleus rows) the sum of the weights.
struct PartsRow {
  int64_t* best;  // [kSamplePartsMax]
  double* count;  // [kSamplePartsMax]
  double* total;  // [kSamplePartsMax]
};
__device__ PartsRow parts_row(const SampleParams& p, int64_t row) {
  int64_t* base = static_cast<int64_t*>(p.parts) + row * kSamplePartsMax * 3;
  return {base, reinterpret_cast<double*>(base + kSamplePartsMax), reinterpret_cast<double*>(base + 2 * kSamplePartsMax)};
}

// The row's best (key << 31 | ~id) from its parts (every thread of the block; n_parts <= blockDim.x).
__device__ int64_t parts_best(const PartsRow& pr, int n_parts, SampleSmem& s) {
  return block_max(int(threadIdx.x) < n_parts ? __ldcg(pr.best + threadIdx.x) : int64_t(0), s);
}
// The row's weight total from its parts, summed in part order (the same double in every block that asks).
__device__ double parts_total(const PartsRow& pr, int n_parts) {
  double t = 0.0;
  for (int i = 0; i < n_parts; ++i) t += __ldcg(pr.total + i);
  return t;
}

// Exclusive scan of v over the block (any block size, one value a thread); *sum = the block's total.
template <class U>
__device__ U block_excl_scan(U v, U* warp_sums, U* sum) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  U incl = v;
  for (int o = 1; o < 32; o *= 2) {
    const U u = __shfl_up_sync(0xFFFFFFFFu, incl, o);
    if (lane >= o) incl += u;
  }
  __syncthreads();
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  U before = incl - v, t = 0;
  for (int w = 0; w < nw; ++w) {
    if (w < warp) before += warp_sums[w];
    t += warp_sums[w];
  }
  *sum = t;
  return before;
}

// The top-k path's threshold (every thread of the block calls it): the highest bin b such that the bins from b up
// hold at least top_k candidates, and that count. Integer sums: every block that asks gets the same.
struct TopkCut {
  uint32_t bin, count;
};
template <int NT>
__device__ TopkCut topk_cut(const uint32_t* hist, int32_t top_k, SampleSmem& s) {
  constexpr int kPer = kSampleBins / NT;
  const int t = threadIdx.x;
  // Thread t holds bins 4095 - kPer * t .. down (the top first), so an exclusive scan in thread order is the count
  // from the top bin down to the thread's first bin.
  uint32_t h[kPer], own = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) own += h[j] = __ldcg(hist + kSampleBins - 1 - (kPer * t + j));
  uint32_t total;
  uint32_t above = block_excl_scan(own, s.red_u, &total);
  if (t == 0) s.digit = 0u, s.found = 0;  // digit: the bin; found: the count (both 0 when never reached)
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const uint32_t before = above;
    above += h[j];
    if (before < uint32_t(top_k) && above >= uint32_t(top_k)) {  // one thread, one bin
      s.digit = uint32_t(kSampleBins - 1 - (kPer * t + j));
      s.found = int32_t(above);
    }
  }
  __syncthreads();
  const TopkCut r{s.digit, uint32_t(s.found)};
  __syncthreads();
  return r;
}

// nucleus_gather_cut (sampling.cuh) with the block: thread t holds buckets 1023 - kPer * t .. down; exclusive scans
// of the mass and the count give each bucket's sums from the top, and the one bucket where the mass first reaches
// the threshold says so. Integer sums and the same threshold: every block that asks gets the same, and the host's.
template <int NT>
__device__ NucleusGatherCut nucleus_cut_block(const CandRow& cr, double total, float top_p, SampleSmem& s) {
  constexpr int kPer = kSampleBuckets / NT;
  static_assert(kPer >= 1 && kSampleBuckets % NT == 0);
  const int t = threadIdx.x;
  const double thr = nucleus_gather_threshold(top_p, total);
  uint64_t mass[kPer], own_m = 0;
  uint32_t cnt[kPer], own_c = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int b = kSampleBuckets - 1 - (kPer * t + j);
    mass[j] = b >= 1 ? __ldcg(reinterpret_cast<const unsigned long long*>(cr.mass) + b) : 0ull;
    cnt[j] = b >= 1 ? __ldcg(cr.nhist + b) : 0u;
    own_m += mass[j];
    own_c += cnt[j];
  }
  unsigned long long total_m;
  uint32_t total_c;
  uint64_t f = block_excl_scan<unsigned long long>(own_m, reinterpret_cast<unsigned long long*>(s.red_l), &total_m);
  uint32_t c = block_excl_scan(own_c, s.red_u, &total_c);
  if (t == 0) s.digit = 1u, s.found = int32_t(total_c);  // none reaches: every survivor (bucket 1 up)
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int b = kSampleBuckets - 1 - (kPer * t + j);
    const bool before = nucleus_reaches(f, thr);
    f += mass[j];
    c += cnt[j];
    if (b >= 1 && !before && nucleus_reaches(f, thr)) {  // one bucket at most
      s.digit = uint32_t(b);
      s.found = int32_t(c);
    }
  }
  __syncthreads();
  const NucleusGatherCut r{s.digit, uint32_t(s.found)};
  __syncthreads();
  return r;
}

// Sorts n (a power of two, <= kSampleCandMax) u64 in shared memory ascending; every thread of the block calls it.
__device__ void bitonic_sort(uint64_t* v, int n) {
  for (int k = 2; k <= n; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n; i += kT) {
        const int l = i ^ j;
        if (l > i) {
          const uint64_t a = v[i], b = v[l];
          if ((a > b) == ((i & k) == 0)) v[i] = b, v[l] = a;
        }
      }
      __syncthreads();
    }
  }
}

// Pass 1 over ids [lo, hi) of row lg by a block of NT threads: the max of (key << 31 | ~id) (the largest key,
// ties -> lowest id) and the count of candidates (keys != 0), both exact whatever the order, so the walk keeps
// many loads in flight: float4s, kUnroll of them requested before any is used, where [lo, hi) and lg allow. hist
// (shared, kSampleBins u32, or null): candidates counted by the key's top 12 bits (the top-k path's histogram).
template <int NT>
__device__ void walk_argmax(const float* lg, int64_t lo, int64_t hi, int64_t& best, double& n_valid,
                            uint32_t* hist = nullptr) {
  const auto consider = [&](uint32_t k, int64_t i) {
    const int64_t v = int64_t(uint64_t(k) << 31 | uint64_t(0x7FFFFFFF - i));
    best = v > best ? v : best;
    n_valid += k != 0 ? 1.0 : 0.0;
    if (hist != nullptr && k != 0) atomicAdd(&hist[k >> 20], 1u);
  };
  if (lo % 4 == 0 && hi % 4 == 0 && reinterpret_cast<uintptr_t>(lg) % 16 == 0) {
    constexpr int kUnroll = 4;
    const float4* lg4 = reinterpret_cast<const float4*>(lg);
    const int64_t j_lo = lo / 4, j_hi = hi / 4;
    for (int64_t j0 = j_lo + threadIdx.x; j0 < j_hi; j0 += int64_t(NT) * kUnroll) {
      float4 f[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = j0 + int64_t(u) * NT;
        if (j < j_hi) f[u] = __ldg(lg4 + j);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = j0 + int64_t(u) * NT;
        if (j >= j_hi) break;
        consider(logit_key(f[u].x), 4 * j);
        consider(logit_key(f[u].y), 4 * j + 1);
        consider(logit_key(f[u].z), 4 * j + 2);
        consider(logit_key(f[u].w), 4 * j + 3);
      }
    }
  } else {
    for (int64_t i = lo + threadIdx.x; i < hi; i += NT) consider(logit_key(__ldg(lg + i)), i);
  }
}

// The four logits of ids i .. i + 3 of row lg (ids >= hi read as NaN: never candidates); one float4 load where the
// row is 16-byte aligned (i is a multiple of 4).
__device__ float4 load4(const float* lg, int64_t i, int64_t hi, bool aligned) {
  if (aligned && i + 4 <= hi) return __ldg(reinterpret_cast<const float4*>(lg + i));
  const float nan = __int_as_float(0x7FC00000);
  return make_float4(i < hi ? __ldg(lg + i) : nan, i + 1 < hi ? __ldg(lg + i + 1) : nan,
                     i + 2 < hi ? __ldg(lg + i + 2) : nan, i + 3 < hi ? __ldg(lg + i + 3) : nan);
}

// Pass 1 of row blockIdx.y split over split.n_parts blocks (blockIdx.x: slices of split.slice ids): partials into
// parts_row. With p.cand, top-k rows also add their slice's coarse histogram into the row's (CandRow::hist).
__global__ void __launch_bounds__(kSampleSplitThreads) argmax_parts_kernel(SampleParams p, SampleSplit split) {
  pdl_allow_dependents();
  pdl_wait();
  constexpr int kNT = kSampleSplitThreads;
  __shared__ SampleSmem s;
  __shared__ uint32_t hist[kSampleBins];
  const int64_t row = blockIdx.y, vocab = p.vocab;
  const int64_t lo = min(vocab, int64_t(blockIdx.x) * split.slice), hi = min(vocab, lo + split.slice);
  const SampleRowParams rp = p.rows[row];
  const bool with_hist = p.cand != nullptr && rp.temperature != 0.0f && sample_topk_fast(rp, vocab);
  if (with_hist) {
    for (int b = threadIdx.x; b < kSampleBins; b += kNT) hist[b] = 0u;
    __syncthreads();
  }
  int64_t best = 0;
  double n_valid = 0.0;
  walk_argmax<kNT>(p.logits + size_t(row) * size_t(vocab), lo, hi, best, n_valid, with_hist ? hist : nullptr);
  best = block_max(best, s);  // (its barriers also order the histogram's adds before the merge below)
  n_valid = block_sum(n_valid, s);
  if (with_hist) {
    uint32_t* row_hist = cand_row(p, row).hist;
    for (int b = threadIdx.x; b < kSampleBins; b += kNT)
      if (hist[b] != 0u) atomicAdd(&row_hist[b], hist[b]);
  }
  if (threadIdx.x == 0) {
    const PartsRow pr = parts_row(p, row);
    pr.best[blockIdx.x] = best;
    pr.count[blockIdx.x] = n_valid;
  }
}

// The nucleus rows' histogram (p.cand; grid (n_parts, m), pass 1's slices): every weight of the slice into the
// part's total (a double, summed in a fixed order: the same every call), and every survivor of min-p into its
// bucket's count and fixed32 mass (integers: exact in any order), added into the row's (CandRow::mass, nhist).
__global__ void __launch_bounds__(kSampleSplitThreads) nucleus_hist_kernel(SampleParams p, SampleSplit split) {
  pdl_allow_dependents();
  pdl_wait();
  constexpr int kNT = kSampleSplitThreads;
  __shared__ SampleSmem s;
  __shared__ unsigned long long mass[kSampleBuckets];
  __shared__ uint32_t cnt[kSampleBuckets];
  const int64_t row = blockIdx.y, vocab = p.vocab;
  const SampleRowParams rp = p.rows[row];
  if (!sample_nucleus(rp, vocab)) return;
  const PartsRow pr = parts_row(p, row);
  const uint32_t best_key = uint32_t(uint64_t(parts_best(pr, split.n_parts, s)) >> 31);
  if (best_key == 0) return;  // every logit NaN / -inf: no draw
  for (int b = threadIdx.x; b < kSampleBuckets; b += kNT) mass[b] = 0ull, cnt[b] = 0u;
  __syncthreads();
  const float max_logit = key_logit(best_key), inv_t = sample_inv_temperature(rp);
  const int64_t lo = min(vocab, int64_t(blockIdx.x) * split.slice), hi = min(vocab, lo + split.slice);
  const float* lg = p.logits + size_t(row) * size_t(vocab);
  const bool aligned = reinterpret_cast<uintptr_t>(lg) % 16 == 0;
  double total = 0.0;
  const auto add = [&](float l) {
    const float w = key_weight(logit_key(l), max_logit, inv_t);
    total += double(w);
    if (nucleus_survives(w, rp.min_p)) {
      const uint32_t b = weight_bucket(w);
      atomicAdd(&cnt[b], 1u);
      const uint64_t fx = fixed32(w);
      if (fx != 0) atomicAdd(&mass[b], static_cast<unsigned long long>(fx));
    }
  };
  for (int64_t i = lo + 4 * int64_t(threadIdx.x); i < hi; i += 4 * kNT) {  // lo is a multiple of 4
    const float4 f = load4(lg, i, hi, aligned);
    add(f.x), add(f.y), add(f.z), add(f.w);  // NaN past hi weighs 0 (and is no survivor)
  }
  total = block_sum(total, s);  // (its barriers also order the histogram's adds before the merge below)
  const CandRow cr = cand_row(p, row);
  for (int b = threadIdx.x; b < kSampleBuckets; b += kNT) {
    if (cnt[b] != 0u) atomicAdd(&cr.nhist[b], cnt[b]);
    if (mass[b] != 0ull) atomicAdd(reinterpret_cast<unsigned long long*>(cr.mass) + b, mass[b]);
  }
  if (threadIdx.x == 0) pr.total[blockIdx.x] = total;
}

// The gather (p.cand; grid (n_parts, m), pass 1's slices) for top-k rows (ids whose key's bin is at or above the
// row's cut) and nucleus rows (survivors of min-p whose weight's bucket is at or above the row's gather cut), in
// tiles of kSampleGatherTile ids: each tile's candidates in id order (a block scan), at an offset reserved with
// one atomic add; the tile's (offset, count) goes into the row's table, so the draw reads them in id order. Rows
// that take neither path, or whose candidates would not fit, gather nothing (the draw agrees: the same cut from
// the same histogram).
__global__ void __launch_bounds__(kSampleSplitThreads) gather_kernel(SampleParams p, SampleSplit split) {
  pdl_allow_dependents();
  pdl_wait();
  constexpr int kNT = kSampleSplitThreads;
  static_assert(kSampleGatherTile == 4 * kNT);
  __shared__ SampleSmem s;
  const int64_t row = blockIdx.y, vocab = p.vocab;
  const SampleRowParams rp = p.rows[row];
  const bool topk = rp.temperature != 0.0f && sample_topk_fast(rp, vocab), nucleus = sample_nucleus(rp, vocab);
  if (!topk && !nucleus) return;
  const CandRow cr = cand_row(p, row);
  const PartsRow pr = parts_row(p, row);
  uint32_t bin = 0;  // top-k: the key bin cut
  uint32_t cap = kSampleCandMax;
  float max_logit = 0.0f, inv_t = 0.0f;
  NucleusGatherCut ncut{0u, 0u};
  if (topk) {
    const TopkCut cut = topk_cut<kNT>(cr.hist, rp.top_k, s);
    if (cut.count < uint32_t(rp.top_k) || cut.count > uint32_t(kSampleCandMax)) return;
    bin = cut.bin;
  } else {
    const uint32_t best_key = uint32_t(uint64_t(parts_best(pr, split.n_parts, s)) >> 31);
    if (best_key == 0) return;
    ncut = nucleus_cut_block<kNT>(cr, parts_total(pr, split.n_parts), rp.top_p, s);
    if (ncut.count == 0u || ncut.count > uint32_t(kSampleNucleusMax)) return;
    max_logit = key_logit(best_key);
    inv_t = sample_inv_temperature(rp);
    cap = kSampleNucleusMax;
  }
  const int64_t lo = min(vocab, int64_t(blockIdx.x) * split.slice), hi = min(vocab, lo + split.slice);
  const float* lg = p.logits + size_t(row) * size_t(vocab);
  const bool aligned = reinterpret_cast<uintptr_t>(lg) % 16 == 0;
  for (int64_t t0 = lo; t0 < hi; t0 += kSampleGatherTile) {
    const int64_t i = t0 + 4 * int64_t(threadIdx.x);
    const float4 f = load4(lg, i, hi, aligned);
    const float l[4] = {f.x, f.y, f.z, f.w};
    uint32_t key[4], mine = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t k = logit_key(l[j]);
      bool take;
      if (topk) {
        take = k != 0u && (k >> 20) >= bin;
      } else {
        const float w = key_weight(k, max_logit, inv_t);
        take = nucleus_survives(w, rp.min_p) && weight_bucket(w) >= ncut.bucket;
      }
      key[j] = take ? k : 0u;
      mine += take ? 1u : 0u;
    }
    uint32_t n_tile;
    uint32_t at = block_excl_scan(mine, s.red_u, &n_tile);
    if (threadIdx.x == 0) {
      const uint32_t base = n_tile != 0u ? atomicAdd(cr.count, n_tile) : 0u;
      cr.tiles[t0 / kSampleGatherTile] = make_uint2(base, n_tile);
      s.digit = base;
    }
    __syncthreads();
    at += s.digit;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (key[j] == 0u) continue;
      if (at < cap) cr.cand[at] = uint64_t(~key[j]) << 32 | uint64_t(i + j);
      ++at;
    }
    __syncthreads();  // s.digit and s.red_u are reused by the next tile
  }
}

// The top-k fast path's draw in the row's block (all threads): the n gathered candidates in rank order, the first
// top_k of them (top-k), min-p and top-p as rank prefixes (weights fall with rank), the draw in id order. Sums in
// double, serially in one thread (at most top_k terms). Returns the pick, -1 when nothing is kept.
// sv: shared u64 [kSampleCandMax + kSampleTopKMax] (the candidates in rank order, then the kept ones by id);
// wv: shared f64 [kSampleTopKMax].
__device__ int32_t draw_topk(const SampleRowParams& rp, const CandRow& tr, uint32_t n, uint32_t best_key,
                             uint64_t* sv, double* wv, SampleSmem& s) {
  int np = 1;
  while (np < int(n)) np <<= 1;
  for (int i = threadIdx.x; i < np; i += kT) sv[i] = i < int(n) ? __ldcg(tr.cand + i) : ~uint64_t(0);
  __syncthreads();
  bitonic_sort(sv, np);  // rank order
  const float max_logit = key_logit(best_key);
  const float inv_t = sample_inv_temperature(rp);
  const auto weight = [&](uint32_t key) {
    return double(sampler_exp(mul_rn(add_rn(key_logit(key), -max_logit), inv_t)));
  };
  const int k = rp.top_k;
  for (int r = threadIdx.x; r < k; r += kT) wv[r] = weight(~uint32_t(sv[r] >> 32));
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int r = 0; r < k; ++r) total += wv[r];
    int kept = k;
    if (rp.min_p > 0.0f) {
      kept = 0;
      while (kept < k && wv[kept] >= double(rp.min_p)) ++kept;
    }
    if (rp.top_p < 1.0f) {  // the smallest rank prefix whose mass reaches top_p * total, else all survivors
      const double target = double(rp.top_p) * total;
      double cum = 0.0;
      for (int r = 0; r < kept; ++r) {
        cum += wv[r];
        if (cum >= target) {
          kept = r + 1;
          break;
        }
      }
    }
    s.found = kept;
  }
  __syncthreads();
  const int kept = s.found;
  __syncthreads();
  if (kept == 0) return -1;
  // The kept candidates in ascending id order, as (id << 32 | key).
  uint64_t* byid = sv + kSampleCandMax;  // [kSampleTopKMax]: kept <= top_k
  np = 1;
  while (np < kept) np <<= 1;
  for (int i = threadIdx.x; i < np; i += kT)
    byid[i] = i < kept ? (sv[i] & 0xFFFFFFFFu) << 32 | (~(sv[i] >> 32) & 0xFFFFFFFFu) : ~uint64_t(0);
  __syncthreads();
  bitonic_sort(byid, np);
  if (threadIdx.x == 0) {
    double mass = 0.0;
    for (int i = 0; i < kept; ++i) mass += weight(uint32_t(byid[i]));
    const double target = double(sampler_uniform(rp.seed, rp.position)) * mass;
    double cum = 0.0;
    int32_t pick = -1, last = -1;
    for (int i = 0; i < kept; ++i) {
      const double w = weight(uint32_t(byid[i]));
      cum += w;
      if (w > 0.0) last = int32_t(byid[i] >> 32);
      if (cum > target) {
        pick = int32_t(byid[i] >> 32);
        break;
      }
    }
    s.found = pick >= 0 ? pick : last;  // u * sum rounded up to the sum: the last kept id with weight > 0
  }
  __syncthreads();
  const int32_t r = s.found;
  __syncthreads();
  return r;
}

// The nucleus path's draw in the row's block (all threads): the row's candidates (the survivors of min-p in the
// buckets from the gather cut up) in id order, their fixed40 mass per bucket, the CPU's bucket walk (estimates
// within a tolerance, else exactly in the CPU's order), the crossing bucket ranked (bitonic sort) and cut, the
// draw. Returns the pick, or -2 when the path is not taken (candidates not gathered, a crossing bucket of more than
// kSampleCrossMax ids): the one-block path draws then. smem: dynamic shared memory, kNucleusSmemBytes.
constexpr int kNucleusSmemBytes = (kSampleNucleusMax + kSampleBuckets + kSampleCrossMax) * 8;
__device__ int32_t draw_nucleus(const SampleParams& p, const SampleRowParams& rp, const CandRow& cr, const PartsRow& pr,
                                int n_parts, uint32_t best_key, uint8_t* smem, SampleSmem& s) {
  const int64_t vocab = p.vocab;
  if (threadIdx.x == 0) s.total = parts_total(pr, n_parts);
  __syncthreads();
  const double total = s.total;
  const NucleusGatherCut ncut = nucleus_cut_block<kT>(cr, total, rp.top_p, s);
  const uint32_t n = __ldcg(cr.count);
  const int64_t n_tiles = int64_t(sample_cand_tiles(vocab));
  if (ncut.count == 0u || ncut.count > uint32_t(kSampleNucleusMax) || n != ncut.count || n_tiles > 2 * kSampleCrossMax)
    return -2;
  uint64_t* cv = reinterpret_cast<uint64_t*>(smem);  // [kSampleNucleusMax] (~key << 32 | id), id order
  unsigned long long* bm = reinterpret_cast<unsigned long long*>(cv + kSampleNucleusMax);  // [kSampleBuckets]
  uint64_t* rk = reinterpret_cast<uint64_t*>(bm + kSampleBuckets);  // [kSampleCrossMax] (~key << 32 | index in cv)
  uint32_t* dst = reinterpret_cast<uint32_t*>(rk);  // [n_tiles] where each tile's candidates go in cv (until ranked)

  // 1. The candidates in id order: tiles in order, each tile's in id order.
  uint32_t base = 0;
  for (int64_t c0 = 0; c0 < n_tiles; c0 += kT) {
    const int64_t t = c0 + threadIdx.x;
    const uint32_t c = t < n_tiles ? __ldcg(&cr.tiles[t].y) : 0u;
    uint32_t sum;
    const uint32_t at = block_excl_scan(c, s.red_u, &sum);
    if (t < n_tiles) dst[t] = base + at;
    base += sum;
  }
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t t = warp; t < n_tiles; t += kW) {
    const uint2 e = __ldcg(&cr.tiles[t]);
    for (uint32_t j = lane; j < e.y; j += 32) cv[dst[t] + j] = __ldcg(cr.cand + e.x + j);
  }
  for (int b = threadIdx.x; b < kSampleBuckets; b += kT) bm[b] = 0ull;
  __syncthreads();

  // 2. Their fixed40 mass per bucket (exact integers).
  const float max_logit = key_logit(best_key), inv_t = sample_inv_temperature(rp);
  const auto weight = [&](uint64_t c) { return key_weight(~uint32_t(c >> 32), max_logit, inv_t); };
  for (uint32_t i = threadIdx.x; i < n; i += kT) {
    const float w = weight(cv[i]);
    atomicAdd(&bm[weight_bucket(w)], static_cast<unsigned long long>(fixed40(w)));
  }
  __syncthreads();

  // 3. The bucket walk and the crossing bucket's cut: on the estimates, and again exactly (the CPU's sums in its
  // order) when one of them lies within its tolerance of a cut.
  const double target = double(rp.top_p) * total;
  for (bool exact = p.exact_only;; exact = true) {
    if (threadIdx.x == 0) {
      if (!(rp.top_p < 1.0f)) {
        s.cross = {NucleusStep::kKeepAll, 0u, 0.0};
      } else if (!exact) {
        s.tol = nucleus_cross_tol(n, vocab, total);
        s.cross = nucleus_cross_estimate(reinterpret_cast<const uint64_t*>(bm), ncut.bucket, target, s.tol);
      } else {  // bucket_mass_: sequential sums in id order (bm's words reused as doubles)
        double* md = reinterpret_cast<double*>(bm);
        for (int b = 0; b < kSampleBuckets; ++b) md[b] = 0.0;
        for (uint32_t i = 0; i < n; ++i) {
          const float w = weight(cv[i]);
          md[weight_bucket(w)] += double(w);
        }
        s.tol = 0.0;
        s.cross = nucleus_cross_exact(md, ncut.bucket, target);
      }
      s.n_cross = 0u;
    }
    __syncthreads();
    const NucleusCross cross = s.cross;
    if (cross.step == NucleusStep::kAmbiguous) continue;  // (thread 0 alone writes s before the next barrier)
    if (cross.step == NucleusStep::kMissed) return -2;
    if (cross.step == NucleusStep::kKeepAll) break;
    for (uint32_t i = threadIdx.x; i < n; i += kT) {
      if (weight_bucket(weight(cv[i])) != cross.bucket) continue;
      const uint32_t slot = atomicAdd(&s.n_cross, 1u);
      if (slot < uint32_t(kSampleCrossMax)) rk[slot] = (cv[i] & 0xFFFFFFFF00000000ull) | uint64_t(i);
    }
    __syncthreads();
    const uint32_t sc = s.n_cross;
    if (sc > uint32_t(kSampleCrossMax)) return -2;
    int np = 1;
    while (np < int(sc)) np <<= 1;
    for (int i = int(sc) + threadIdx.x; i < np; i += kT) rk[i] = ~uint64_t(0);
    __syncthreads();
    bitonic_sort(rk, np);  // rank order: key descending, then id
    if (threadIdx.x == 0) {
      s.keep = nucleus_keep([&](int32_t r) { return weight(rk[r]); }, int32_t(sc), target - cross.before, s.tol);
    }
    __syncthreads();
    const NucleusKeep keep = s.keep;
    __syncthreads();
    if (keep.ambiguous) continue;
    // Dropped: the crossing bucket's members past keep, and every candidate below the crossing bucket (key 0).
    for (uint32_t r = uint32_t(keep.keep) + threadIdx.x; r < sc; r += kT) {
      const uint32_t i = uint32_t(rk[r]);
      cv[i] = 0xFFFFFFFF00000000ull | (cv[i] & 0xFFFFFFFFull);
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < n; i += kT)
      if (weight_bucket(weight(cv[i])) < cross.bucket) cv[i] = 0xFFFFFFFF00000000ull | (cv[i] & 0xFFFFFFFFull);
    __syncthreads();
    break;
  }

  // 4. The draw: fixed40 prefix sums in id order (per thread a contiguous run, then a block scan); the one id whose
  // estimate interval clears u * kept by the tolerance, else sample_dense's draw exactly (nucleus_draw_exact).
  const float u = sampler_uniform(rp.seed, rp.position);
  if (!p.exact_only) {
    const uint32_t ch = (n + kT - 1) / kT, i0 = min(n, threadIdx.x * ch), i1 = min(n, i0 + ch);
    unsigned long long own = 0;
    for (uint32_t i = i0; i < i1; ++i) own += fixed40(weight(cv[i]));
    unsigned long long kept;
    unsigned long long e = block_excl_scan<unsigned long long>(own, reinterpret_cast<unsigned long long*>(s.red_l), &kept);
    if (threadIdx.x == 0) s.found = -1;
    __syncthreads();
    const double kept_d = double(kept) * 0x1p-40, tgt = double(u) * kept_d, tol = nucleus_draw_tol(n, kept_d);
    for (uint32_t i = i0; i < i1; ++i) {
      const double lo = double(e) * 0x1p-40;
      e += fixed40(weight(cv[i]));
      if (lo <= tgt - tol && double(e) * 0x1p-40 > tgt + tol) s.found = int32_t(uint32_t(cv[i]));
    }
    __syncthreads();
    const int32_t pick = s.found;
    __syncthreads();
    if (pick >= 0) return pick;
  }
  if (threadIdx.x == 0) {
    s.found = nucleus_draw_exact([&](int32_t i) { return int64_t(uint32_t(cv[i])); },
                                 [&](int32_t i) { return weight(cv[i]); }, int32_t(n), vocab, u);
  }
  __syncthreads();
  const int32_t pick = s.found;
  __syncthreads();
  return pick;
}

__global__ void __launch_bounds__(kT) sample_kernel(SampleParams p, SampleSplit split) {
  pdl_allow_dependents();
  pdl_wait();
  __shared__ SampleSmem s;
  extern __shared__ double warp_hist[];  // (kW, 256): radix_select's per-warp histograms; the fast paths' arrays
  const int64_t row = blockIdx.x, vocab = p.vocab;
  const float* lg = p.logits + size_t(row) * size_t(vocab);
  const SampleRowParams rp = p.rows[row];
  const auto key = [&](int64_t i) { return logit_key(__ldg(lg + i)); };

  // 1. argmax and the number of candidates (argmax_parts_kernel's partials when p.parts is set).
  int64_t best = 0;
  double n_valid = 0.0;
  if (p.parts != nullptr) {
    const PartsRow pr = parts_row(p, row);
    if (int(threadIdx.x) < split.n_parts) {
      best = __ldcg(pr.best + threadIdx.x);
      n_valid = __ldcg(pr.count + threadIdx.x);
    }
  } else {
    walk_argmax<kT>(lg, 0, vocab, best, n_valid);
  }
  best = block_max(best, s);
  const uint32_t best_key = uint32_t(uint64_t(best) >> 31);
  const int32_t arg = int32_t(0x7FFFFFFF - (best & 0x7FFFFFFF));
  n_valid = block_sum(n_valid, s);
  const bool greedy = best_key == 0 || rp.temperature == 0.0f;
  if (p.cand != nullptr && !greedy) {
    // The fast paths where the row's candidates were gathered (gather_kernel agrees: the same cuts from the same
    // histograms); what the row's passes wrote into its scratch is zeroed for the next call either way.
    const CandRow cr = cand_row(p, row);
    const bool topk = sample_topk_fast(rp, vocab), nucleus = sample_nucleus(rp, vocab);
    int32_t pick = -2;  // -2: not taken
    if (topk && double(rp.top_k) < n_valid) {
      const TopkCut cut = topk_cut<kT>(cr.hist, rp.top_k, s);
      const uint32_t gathered = __ldcg(cr.count);
      if (cut.count >= uint32_t(rp.top_k) && cut.count <= uint32_t(kSampleCandMax) && gathered == cut.count) {
        uint64_t* sv = reinterpret_cast<uint64_t*>(warp_hist);
        pick = draw_topk(rp, cr, gathered, best_key, sv,
                         reinterpret_cast<double*>(sv + kSampleCandMax + kSampleTopKMax), s);
      }
    } else if (nucleus) {
      pick = draw_nucleus(p, rp, cr, parts_row(p, row), split.n_parts, best_key, reinterpret_cast<uint8_t*>(warp_hist), s);
    }
    __syncthreads();  // every read of the histograms is done
    if (topk) {
      for (int b = threadIdx.x; b < kSampleBins; b += kT) cr.hist[b] = 0u;
    } else if (nucleus) {
      for (int b = threadIdx.x; b < kSampleBuckets; b += kT) cr.mass[b] = 0ull, cr.nhist[b] = 0u;
    }
    if (threadIdx.x == 0 && (topk || nucleus)) *cr.count = 0u;
    if (pick != -2) {
      if (threadIdx.x == 0) p.out[row] = pick;
      return;
    }
  }
  if (greedy) {
    if (threadIdx.x == 0) p.out[row] = best_key == 0 ? -1 : arg;
    return;
  }

  // 2. top-k: keys > tk, plus the first ties (ascending id) up to id tk_cut.
  const bool use_k = rp.top_k > 0 && rp.top_k < vocab && double(rp.top_k) < n_valid;
  uint32_t tk = 0;
  int32_t tk_cut = int32_t(vocab);
  if (use_k) {
    double above = 0.0;
    tk = radix_select(
        vocab, double(rp.top_k), [](int64_t) { return true; }, key, [](int64_t) { return 1.0; }, s, warp_hist,
        &above);
    tk_cut = scan_find<false>(vocab, double(rp.top_k) - above, [&](int64_t i) { return key(i) == tk ? 1.0 : 0.0; }, s);
  }
  const auto in_k = [&](int64_t i) {
    const uint32_t k = key(i);
    return k != 0 && (!use_k || k > tk || (k == tk && i <= tk_cut));
  };

  // 3. weights, their total over the top-k set, min-p.
  const float max_logit = key_logit(best_key);
  const float inv_t = sample_inv_temperature(rp);
  const auto weight = [&](int64_t i) {
    return sampler_exp(mul_rn(add_rn(key_logit(key(i)), -max_logit), inv_t));
  };
  double total = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += kT) total += in_k(i) ? double(weight(i)) : 0.0;
  total = block_sum(total, s);
  const auto in_m = [&](int64_t i) { return in_k(i) && (rp.min_p <= 0.0f || weight(i) >= rp.min_p); };

  // 4. top-p over the survivors, ranked by key then id.
  bool use_p = rp.top_p < 1.0f;
  uint32_t tp = 0;
  int32_t tp_cut = int32_t(vocab);
  if (use_p) {
    const double target = double(rp.top_p) * total;
    double above = 0.0;
    tp = radix_select(vocab, target, in_m, key, [&](int64_t i) { return double(weight(i)); }, s, warp_hist, &above);
    if (tp == 0) {
      use_p = false;  // rounding kept the mass below target: keep everything (as the CPU does)
    } else {
      tp_cut = scan_find<false>(vocab, target - above,
                                [&](int64_t i) { return key(i) == tp && in_m(i) ? double(weight(i)) : 0.0; }, s);
      if (tp_cut < 0) tp_cut = int32_t(vocab);
    }
  }
  const auto kept_w = [&](int64_t i) {
    if (!in_m(i)) return 0.0;
    const uint32_t k = key(i);
    if (use_p && !(k > tp || (k == tp && i <= tp_cut))) return 0.0;
    return double(weight(i));
  };

  // 5. the draw.
  double kept = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += kT) kept += kept_w(i);
  kept = block_sum(kept, s);
  const double target = double(sampler_uniform(rp.seed, rp.position)) * kept;
  int32_t pick = scan_find<true>(vocab, target, kept_w, s);
  if (pick < 0) {  // u * sum rounded up to the sum: the last kept id with weight > 0
    int64_t last = -1;
    for (int64_t i = threadIdx.x; i < vocab; i += kT) last = kept_w(i) > 0.0 ? i : last;
    pick = int32_t(block_max(last, s));
  }
  if (threadIdx.x == 0) p.out[row] = pick;
}

int sample_sm_count() {
  int dev = 0, n = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&dev));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

}  // namespace

void sample_rows(const SampleParams& p, cudaStream_t stream) {
  if (p.m == 0) return;
  FERRY_CUDA_REQUIRE(p.vocab > 0 && p.vocab < 0x7FFFFFFF && p.m <= 0x7FFFFFFF);
  const SampleSplit split = plan_sample_split(p.m, p.vocab, sample_sm_count());
  FERRY_CUDA_REQUIRE(split.n_parts >= 1 && split.n_parts <= kSamplePartsMax && split.n_parts <= kT);
  const dim3 split_grid(unsigned(split.n_parts), unsigned(p.m)), split_block(kSampleSplitThreads);
  if (p.parts != nullptr) {
    FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.parts) % 8 == 0 && p.m <= 0xFFFF);  // rows on grid.y
    launch_pdl(argmax_parts_kernel, split_grid, split_block, 0, stream, p, split);
    FERRY_CUDA_CHECK_LAUNCH(argmax_parts_kernel);
  }
  if (p.cand != nullptr) {
    FERRY_CUDA_REQUIRE(p.parts != nullptr && reinterpret_cast<uintptr_t>(p.cand) % 16 == 0);
    if (p.nucleus) {
      launch_pdl(nucleus_hist_kernel, split_grid, split_block, 0, stream, p, split);
      FERRY_CUDA_CHECK_LAUNCH(nucleus_hist_kernel);
    }
    launch_pdl(gather_kernel, split_grid, split_block, 0, stream, p, split);
    FERRY_CUDA_CHECK_LAUNCH(gather_kernel);
  }
  // radix_select's per-warp histograms (64 KB); the top-k path's candidates (48 KB) and the nucleus path's arrays
  // (104 KB) reuse them. Two blocks of 1,024 threads still fit an SM (2 x ~108 KB of 228 KB).
  constexpr int kHistBytes = kW * 256 * int(sizeof(double));
  constexpr int kDrawBytes = kHistBytes > kNucleusSmemBytes ? kHistBytes : kNucleusSmemBytes;
  static_assert(size_t(kSampleCandMax + 2 * kSampleTopKMax) * 8 <= size_t(kDrawBytes));
  static_assert(kDrawBytes <= 227 * 1024);
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kDrawBytes));
  launch_pdl(sample_kernel, dim3(unsigned(p.m)), dim3(kT), size_t(kDrawBytes), stream, p, split);
  FERRY_CUDA_CHECK_LAUNCH(sample_kernel);
}

}  // namespace ferry::cuda_ops
