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

// Pass 1 over ids [lo, hi) of row lg: the max of (key << 31 | ~id) (the largest key, ties -> lowest id) and the
// count of candidates (keys != 0), both exact whatever the order, so the walk keeps many loads in flight:
// float4s, kUnroll of them requested before any is used, where [lo, hi) and lg allow.
__device__ void walk_argmax(const float* lg, int64_t lo, int64_t hi, int64_t& best, double& n_valid) {
  const auto consider = [&](uint32_t k, int64_t i) {
    const int64_t v = int64_t(uint64_t(k) << 31 | uint64_t(0x7FFFFFFF - i));
    best = v > best ? v : best;
    n_valid += k != 0 ? 1.0 : 0.0;
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
__global__ void __launch_bounds__(kT) argmax_parts_kernel(SampleParams p) {
  pdl_allow_dependents();
  pdl_wait();
  __shared__ SampleSmem s;
  const int64_t row = blockIdx.y, vocab = p.vocab;
  const int64_t slice = ((vocab + kSampleParts - 1) / kSampleParts + 3) / 4 * 4;
  const int64_t lo = min(vocab, int64_t(blockIdx.x) * slice), hi = min(vocab, lo + slice);
  int64_t best = 0;
  double n_valid = 0.0;
  walk_argmax(p.logits + size_t(row) * size_t(vocab), lo, hi, best, n_valid);
  best = block_max(best, s);
  n_valid = block_sum(n_valid, s);
  if (threadIdx.x == 0) {
    static_cast<int64_t*>(p.parts)[row * kSampleParts + blockIdx.x] = best;
    reinterpret_cast<double*>(static_cast<int64_t*>(p.parts) + p.m * kSampleParts)[row * kSampleParts + blockIdx.x] = n_valid;
  }
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
  if (best_key == 0 || rp.temperature == 0.0f) {
    if (threadIdx.x == 0) p.out[row] = best_key == 0 ? -1 : arg;
    return;
  }
  n_valid = block_sum(n_valid, s);

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
  constexpr int kHistBytes = kW * 256 * int(sizeof(double));  // radix_select's per-warp histograms: 64 KB
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kHistBytes));
  launch_pdl(sample_kernel, dim3(unsigned(p.m)), dim3(kT), size_t(kHistBytes), stream, p);
  FERRY_CUDA_CHECK_LAUNCH(sample_kernel);
}

}  // namespace ferry::cuda_ops
