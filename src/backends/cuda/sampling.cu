// GPU sampling (design: sampling.cuh). One block of kSampleThreads per row; every pass walks the row in
// tiles of kSampleThreads consecutive ids (coalesced 4-byte reads; the row stays in L2 between passes). Pass 1
// (argmax, candidate count) may run first over kSampleParts blocks a row (SampleParams::parts).
#include "backends/cuda/sampling.cuh"

#include "backends/cuda/common.cuh"
#include "backends/cuda/pdl.cuh"

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
};

__device__ double block_sum(double v, SampleSmem& s) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) s.red_d[threadIdx.x / 32] = v;
  __syncthreads();
  double t = 0.0;
  for (int w = 0; w < kW; ++w) t += s.red_d[w];  // same order in every thread
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
  for (int w = 1; w < kW; ++w) m = s.red_l[w] > m ? s.red_l[w] : m;
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
// to with shared-memory atomics, took ~0.2 ms a pass at a 128K vocabulary (H200, sampling_bench): the first
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

// A row's part of SampleParams::topk (sample_rows_topk_row_bytes): the coarse histogram, the gathered count, the
// candidates as (~key << 32 | id): ascending order is rank order (largest key first, ties by ascending id).
struct TopkRow {
  uint32_t* hist;   // [kSampleBins]
  uint32_t* count;  // candidates gathered (may pass kSampleCandMax: then only the first kSampleCandMax are kept)
  uint64_t* cand;   // [kSampleCandMax]
};
__device__ TopkRow topk_row(const SampleParams& p, int64_t row) {
  uint8_t* base = static_cast<uint8_t*>(p.topk) + size_t(row) * sample_rows_topk_row_bytes();
  uint32_t* hist = reinterpret_cast<uint32_t*>(base);
  return {hist, hist + kSampleBins, reinterpret_cast<uint64_t*>(base + kSampleBins * 4 + 16)};
}

// The top-k fast path's threshold (every thread of the block calls it): the highest bin b such that the bins
// from b up hold at least top_k candidates, and that count. Integer sums: every block that asks gets the same.
struct TopkCut {
  uint32_t bin, count;
};
__device__ TopkCut topk_cut(const uint32_t* hist, int32_t top_k, SampleSmem& s) {
  static_assert(kSampleBins == 4 * kT);
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  // Thread t holds bins 4095 - 4t .. 4092 - 4t (the top first), so an inclusive scan in thread order is a sum
  // from the top bin down.
  uint32_t h[4], own = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) own += h[j] = __ldcg(hist + kSampleBins - 1 - (4 * t + j));
  uint32_t incl = own;
  for (int o = 1; o < 32; o *= 2) {
    const uint32_t u = __shfl_up_sync(0xFFFFFFFFu, incl, o);
    if (lane >= o) incl += u;
  }
  __syncthreads();
  if (lane == 31) s.red_u[warp] = incl;
  if (t == 0) s.digit = 0u, s.found = 0;  // digit: the bin; found: the count (both 0 when never reached)
  __syncthreads();
  uint32_t above = incl - own;
  for (int w = 0; w < warp; ++w) above += s.red_u[w];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t before = above;
    above += h[j];
    if (before < uint32_t(top_k) && above >= uint32_t(top_k)) {  // one thread, one bin
      s.digit = uint32_t(kSampleBins - 1 - (4 * t + j));
      s.found = int32_t(above);
    }
  }
  __syncthreads();
  const TopkCut r{s.digit, uint32_t(s.found)};
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

// Pass 1 over ids [lo, hi) of row lg: the max of (key << 31 | ~id) (the largest key, ties -> lowest id) and the
// count of candidates (keys != 0), both exact whatever the order, so the walk keeps many loads in flight:
// float4s, kUnroll of them requested before any is used, where [lo, hi) and lg allow. hist (shared, kSampleBins
// u32, or null): candidates counted by the key's top 12 bits (the top-k fast path's coarse histogram).
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
    for (int64_t j0 = j_lo + threadIdx.x; j0 < j_hi; j0 += int64_t(kT) * kUnroll) {
      float4 f[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = j0 + int64_t(u) * kT;
        if (j < j_hi) f[u] = __ldg(lg4 + j);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = j0 + int64_t(u) * kT;
        if (j >= j_hi) break;
        consider(logit_key(f[u].x), 4 * j);
        consider(logit_key(f[u].y), 4 * j + 1);
        consider(logit_key(f[u].z), 4 * j + 2);
        consider(logit_key(f[u].w), 4 * j + 3);
      }
    }
  } else {
    for (int64_t i = lo + threadIdx.x; i < hi; i += kT) consider(logit_key(__ldg(lg + i)), i);
  }
}

// Pass 1 of row blockIdx.y split over kSampleParts blocks (blockIdx.x: slices of whole float4s): partials into
// p.parts, (m, parts) i64 bests then (m, parts) f64 counts.
// With p.topk, rows that will draw among top-k candidates also add their slice's coarse histogram into the row's
// (TopkRow::hist).
__global__ void __launch_bounds__(kT) argmax_parts_kernel(SampleParams p) {
  pdl_allow_dependents();
  pdl_wait();
  __shared__ SampleSmem s;
  __shared__ uint32_t hist[kSampleBins];
  const int64_t row = blockIdx.y, vocab = p.vocab;
  const int64_t slice = ((vocab + kSampleParts - 1) / kSampleParts + 3) / 4 * 4;
  const int64_t lo = min(vocab, int64_t(blockIdx.x) * slice), hi = min(vocab, lo + slice);
  const SampleRowParams rp = p.rows[row];
  const bool with_hist = p.topk != nullptr && rp.temperature != 0.0f && sample_topk_fast(rp, vocab);
  if (with_hist) {
    for (int b = threadIdx.x; b < kSampleBins; b += kT) hist[b] = 0u;
    __syncthreads();
  }
  int64_t best = 0;
  double n_valid = 0.0;
  walk_argmax(p.logits + size_t(row) * size_t(vocab), lo, hi, best, n_valid, with_hist ? hist : nullptr);
  best = block_max(best, s);  // (its barriers also order the histogram's adds before the merge below)
  n_valid = block_sum(n_valid, s);
  if (with_hist) {
    uint32_t* row_hist = topk_row(p, row).hist;
    for (int b = threadIdx.x; b < kSampleBins; b += kT)
      if (hist[b] != 0u) atomicAdd(&row_hist[b], hist[b]);
  }
  if (threadIdx.x == 0) {
    static_cast<int64_t*>(p.parts)[row * kSampleParts + blockIdx.x] = best;
    reinterpret_cast<double*>(static_cast<int64_t*>(p.parts) + p.m * kSampleParts)[row * kSampleParts + blockIdx.x] = n_valid;
  }
}

// The top-k fast path's gather (p.topk; grid (kSampleParts, m), the slices of argmax_parts_kernel): every id of
// the slice whose key's bin is at or above the row's cut goes into the row's candidates (unordered; the row's
// block sorts them). Rows that do not take the path, or whose candidates would not fit, gather nothing.
__global__ void __launch_bounds__(kT) gather_topk_kernel(SampleParams p) {
  pdl_allow_dependents();
  pdl_wait();
  __shared__ SampleSmem s;
  const int64_t row = blockIdx.y, vocab = p.vocab;
  const SampleRowParams rp = p.rows[row];
  if (rp.temperature == 0.0f || !sample_topk_fast(rp, vocab)) return;
  const TopkRow tr = topk_row(p, row);
  const TopkCut cut = topk_cut(tr.hist, rp.top_k, s);
  if (cut.count < uint32_t(rp.top_k) || cut.count > uint32_t(kSampleCandMax)) return;
  const int64_t slice = ((vocab + kSampleParts - 1) / kSampleParts + 3) / 4 * 4;
  const int64_t lo = min(vocab, int64_t(blockIdx.x) * slice), hi = min(vocab, lo + slice);
  const float* lg = p.logits + size_t(row) * size_t(vocab);
  for (int64_t i = lo + threadIdx.x; i < hi; i += kT) {
    const uint32_t k = logit_key(__ldg(lg + i));
    if (k == 0u || (k >> 20) < cut.bin) continue;
    const uint32_t slot = atomicAdd(tr.count, 1u);
    if (slot < uint32_t(kSampleCandMax)) tr.cand[slot] = uint64_t(~k) << 32 | uint64_t(i);
  }
}

// The top-k fast path's draw in the row's block (all threads): the n gathered candidates in rank order, the first
// top_k of them (top-k), min-p and top-p as rank prefixes (weights fall with rank), the draw in id order. Sums in
// double, serially in one thread (at most top_k terms). Returns the pick, -1 when nothing is kept.
// sv: shared u64 [kSampleCandMax + kSampleTopKMax] (the candidates in rank order, then the kept ones by id);
// wv: shared f64 [kSampleTopKMax].
__device__ int32_t draw_topk(const SampleRowParams& rp, const TopkRow& tr, uint32_t n, uint32_t best_key,
                             uint64_t* sv, double* wv, SampleSmem& s) {
  int np = 1;
  while (np < int(n)) np <<= 1;
  for (int i = threadIdx.x; i < np; i += kT) sv[i] = i < int(n) ? __ldcg(tr.cand + i) : ~uint64_t(0);
  __syncthreads();
  bitonic_sort(sv, np);  // rank order
  const float max_logit = key_logit(best_key);
  const float inv_t = fminf(1.0f / rp.temperature, 3.402823466e38f);
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

__global__ void __launch_bounds__(kT) sample_kernel(SampleParams p) {
  pdl_allow_dependents();
  pdl_wait();
  __shared__ SampleSmem s;
  extern __shared__ double warp_hist[];  // (kW, 256): radix_select's per-warp histograms
  const int64_t row = blockIdx.x, vocab = p.vocab;
  const float* lg = p.logits + size_t(row) * size_t(vocab);
  const SampleRowParams rp = p.rows[row];
  const auto key = [&](int64_t i) { return logit_key(__ldg(lg + i)); };

  // 1. argmax and the number of candidates (argmax_parts_kernel's partials when p.parts is set).
  int64_t best = 0;
  double n_valid = 0.0;
  if (p.parts != nullptr) {
    const int64_t* part_best = static_cast<const int64_t*>(p.parts) + row * kSampleParts;
    const double* part_count = reinterpret_cast<const double*>(static_cast<const int64_t*>(p.parts) + p.m * kSampleParts) +
                               row * kSampleParts;
    if (threadIdx.x < kSampleParts) {
      best = part_best[threadIdx.x];
      n_valid = part_count[threadIdx.x];
    }
  } else {
    walk_argmax(lg, 0, vocab, best, n_valid);
  }
  best = block_max(best, s);
  const uint32_t best_key = uint32_t(uint64_t(best) >> 31);
  const int32_t arg = int32_t(0x7FFFFFFF - (best & 0x7FFFFFFF));
  n_valid = block_sum(n_valid, s);
  const bool greedy = best_key == 0 || rp.temperature == 0.0f;
  if (p.topk != nullptr) {
    // The top-k fast path where the row's candidates were gathered (gather_topk_kernel agrees: the same cut from
    // the same histogram); the row's scratch is zeroed for the next call either way.
    const TopkRow tr = topk_row(p, row);
    int32_t pick = -2;  // -2: not taken
    if (!greedy && sample_topk_fast(rp, vocab) && double(rp.top_k) < n_valid) {
      const TopkCut cut = topk_cut(tr.hist, rp.top_k, s);
      const uint32_t gathered = __ldcg(tr.count);
      if (cut.count >= uint32_t(rp.top_k) && cut.count <= uint32_t(kSampleCandMax) && gathered == cut.count) {
        uint64_t* sv = reinterpret_cast<uint64_t*>(warp_hist);
        pick = draw_topk(rp, tr, gathered, best_key, sv,
                         reinterpret_cast<double*>(sv + kSampleCandMax + kSampleTopKMax), s);
      }
    }
    __syncthreads();  // every read of the histogram is done
    for (int b = threadIdx.x; b < kSampleBins; b += kT) tr.hist[b] = 0u;
    if (threadIdx.x == 0) *tr.count = 0u;
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
  const float inv_t = fminf(1.0f / rp.temperature, 3.402823466e38f);
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

}  // namespace

void sample_rows(const SampleParams& p, cudaStream_t stream) {
  if (p.m == 0) return;
  FERRY_CUDA_REQUIRE(p.vocab > 0 && p.vocab < 0x7FFFFFFF && p.m <= 0x7FFFFFFF);
  if (p.parts != nullptr) {
    FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.parts) % 8 == 0 && p.m <= 0xFFFF);  // rows on grid.y
    launch_pdl(argmax_parts_kernel, dim3(unsigned(kSampleParts), unsigned(p.m)), dim3(kT), 0, stream, p);
    FERRY_CUDA_CHECK_LAUNCH(argmax_parts_kernel);
  }
  if (p.topk != nullptr) {
    FERRY_CUDA_REQUIRE(p.parts != nullptr && reinterpret_cast<uintptr_t>(p.topk) % 16 == 0);
    launch_pdl(gather_topk_kernel, dim3(unsigned(kSampleParts), unsigned(p.m)), dim3(kT), 0, stream, p);
    FERRY_CUDA_CHECK_LAUNCH(gather_topk_kernel);
  }
  // radix_select's per-warp histograms (64 KB); the top-k path's candidates reuse them (48 KB)
  constexpr int kHistBytes = kW * 256 * int(sizeof(double));
  static_assert(size_t(kSampleCandMax + 2 * kSampleTopKMax) * 8 <= size_t(kHistBytes));
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kHistBytes));
  launch_pdl(sample_kernel, dim3(unsigned(p.m)), dim3(kT), size_t(kHistBytes), stream, p);
  FERRY_CUDA_CHECK_LAUNCH(sample_kernel);
}

}  // namespace ferry::cuda_ops
