// Two shapes of the same math. The angle pos * inv_freq[k] and its sine and cosine are computed in double
// (as the CPU reference: positions up to 1e6 times frequencies near 1 keep their precision), once per (token,
// pair), and shared by every head of the token.
//  - vector kernel (head_dim % 4 == 0, x 16-byte aligned, half % 4 == 0 for NeoX / half % 2 == 0 for
//    interleaved, half <= kMaxSmemHalf): a block per token. Each thread first issues all its float4 loads of the
//    token's rotated values (kItems items; a NeoX item is the float4s at i and i + half, an interleaved item one
//    float4 = two pairs), then the block computes the token's cos/sin into shared memory, then rotates and
//    stores from registers. Dims past 2 * half are neither read nor written.
//  - scalar kernel (anything else): a thread per (token, pair), looping over the heads. Its loop made one
//    dependent 8-byte round trip per head (the stores of head h may alias the loads of head h + 1; its
//    bandwidth: docs/perf-log.md, 2026-11-29).
#include "backends/cuda/elementwise/rope.cuh"

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kThreads = 128;
constexpr int kVecThreads = 128;
constexpr int64_t kMaxSmemHalf = 1024;  // cos/sin of one token in shared memory: 8 KB

__global__ void rope_kernel(RopeParams p) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= p.n * p.half) return;
  const int64_t t = i / p.half, k = i % p.half;
  double s, c;
  sincos(double(p.positions[t]) * double(p.inv_freq[k]), &s, &c);
  const float cs = float(c), sn = float(s);
  const int64_t i0 = p.interleaved ? 2 * k : k;
  const int64_t i1 = p.interleaved ? 2 * k + 1 : k + p.half;  // NeoX: pairs (i, i + rotated dims / 2)
  for (int64_t h = 0; h < p.n_heads; ++h) {
    float* v = p.x + (t * p.n_heads + h) * p.head_dim;
    const float a = v[i0], b = v[i1];
    v[i0] = a * cs - b * sn;
    v[i1] = a * sn + b * cs;
  }
}

__device__ __forceinline__ void rotate(float& a, float& b, float cs, float sn) {
  const float x = a, y = b;
  a = x * cs - y * sn;
  b = x * sn + y * cs;
}

// Block = one token (blockIdx.x); items per head: half / 4 (NeoX) or half / 2 (interleaved); the token's items
// are head-major, kItems per thread per round (thread t takes items t, t + kVecThreads, ...).
// Shared: cs[half], sn[half] f32 (dynamic, 8 * half bytes).
template <bool kInterleaved, int kItems>
__global__ void __launch_bounds__(kVecThreads, 6) rope_vec_kernel(RopeParams p) {
  extern __shared__ float trig[];  // (2, half): cos then sin
  pdl_allow_dependents();
  const int half = int(p.half);
  // inv_freq is a model constant (written once at load time): read before the wait.
  const int k0 = threadIdx.x;
  const float f0 = k0 < half ? p.inv_freq[k0] : 0.f;
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int per_head = kInterleaved ? half / 2 : half / 4;
  const int items = int(p.n_heads) * per_head;
  float4* row = reinterpret_cast<float4*>(p.x + t * p.n_heads * p.head_dim);  // (n_heads, head_dim / 4) float4
  const int head_vecs = int(p.head_dim / 4);
  const int32_t pos = p.positions[t];
  bool trig_ready = false;
  for (int base = 0; base < items; base += kVecThreads * kItems) {
    float4 a[kItems], b[kItems];
    int at[kItems], qs[kItems];  // float4 index in the token's row of item j's first float4; its q (-1: none)
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int it = base + threadIdx.x + j * kVecThreads;
      qs[j] = -1;
      if (it < items) {
        const int h = it / per_head, q = it % per_head;
        at[j] = h * head_vecs + q;
        qs[j] = q;
        a[j] = row[at[j]];
        if constexpr (!kInterleaved) b[j] = row[at[j] + half / 4];
      }
    }
    if (!trig_ready) {  // while the loads are in flight
      for (int k = k0; k < half; k += kVecThreads) {
        double s, c;
        sincos(double(pos) * double(k == k0 ? f0 : p.inv_freq[k]), &s, &c);
        trig[k] = float(c);
        trig[half + k] = float(s);
      }
      __syncthreads();
      trig_ready = true;
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int q = qs[j];
      if (q < 0) continue;
      if constexpr (kInterleaved) {
        const int k = 2 * q;  // pairs (4q, 4q+1) and (4q+2, 4q+3) of the head
        rotate(a[j].x, a[j].y, trig[k], trig[half + k]);
        rotate(a[j].z, a[j].w, trig[k + 1], trig[half + k + 1]);
        row[at[j]] = a[j];
      } else {
        const int k = 4 * q;  // pairs (k + e, k + e + half), e = 0..3
        rotate(a[j].x, b[j].x, trig[k], trig[half + k]);
        rotate(a[j].y, b[j].y, trig[k + 1], trig[half + k + 1]);
        rotate(a[j].z, b[j].z, trig[k + 2], trig[half + k + 2]);
        rotate(a[j].w, b[j].w, trig[k + 3], trig[half + k + 3]);
        row[at[j]] = a[j];
        row[at[j] + half / 4] = b[j];
      }
    }
  }
}

// Launches the vector kernel when the shape takes it; false otherwise.
bool launch_vec(const RopeParams& p, cudaStream_t stream) {
  const bool shape_ok = p.head_dim % 4 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.half > 0 &&
                        p.half <= kMaxSmemHalf && (p.interleaved ? p.half % 2 == 0 : p.half % 4 == 0);
  // Item indices and float4 offsets within a token are 32-bit.
  if (!shape_ok || p.n > 0x7FFFFFFF || p.n_heads * p.head_dim > (int64_t(1) << 30)) return false;
  const size_t smem = size_t(2 * p.half) * sizeof(float);
  // 8 float4 registers of loads per thread in either ordering (NeoX items are two float4s).
  if (p.interleaved) {
    launch_pdl(rope_vec_kernel<true, 8>, dim3(unsigned(p.n)), dim3(kVecThreads), smem, stream, p);
  } else {
    launch_pdl(rope_vec_kernel<false, 4>, dim3(unsigned(p.n)), dim3(kVecThreads), smem, stream, p);
  }
  return true;
}

}  // namespace

void rope(const RopeParams& p, cudaStream_t stream) {
  if (p.n * p.half == 0) return;
  FERRY_CUDA_REQUIRE(2 * p.half <= p.head_dim);
  if (launch_vec(p, stream)) {
    FERRY_CUDA_CHECK_LAUNCH(rope_vec_kernel);
    return;
  }
  launch_pdl(rope_kernel, dim3(grid_for(p.n * p.half, kThreads)), dim3(kThreads), 0, stream, p);
  FERRY_CUDA_CHECK_LAUNCH(rope_kernel);
}

}  // namespace ferry::cuda_ops
