// AVX-512 dot kernels. The quantized formats reuse quant_dot_x86.h compiled with AVX512-VNNI (vpdpbusd on
// 256-bit vectors: one instruction instead of maddubs + madd, no int16 saturation); the float weight types
// run on 512-bit vectors, BF16 x BF16 through vdpbf16ps when the CPU has AVX512-BF16.
#include "backends/cpu/quant_dot_kernels.h"

#if defined(__x86_64__)

// GCC 12's avx512fintrin.h trips -Wuninitialized on its own _mm512_undefined_* helpers (a known false
// positive when the intrinsics are inlined into target("avx512f") functions).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define FERRY_X86_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"
#define FERRY_X86_VNNI 1
#include "backends/cpu/quant_dot_x86.h"
#include "backends/cpu/quant_dot_x86_512.h"
#include "core/fp16.h"

#define FERRY_AVX512_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"))) inline
#define FERRY_AVX512BF16_FN \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))) inline

namespace ferry::dot_kernels {
namespace {

struct F32Load16 {
  using T = float;
  FERRY_AVX512_FN static __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
  static float one(float v) { return v; }
};
struct F16Load16 {
  using T = uint16_t;
  FERRY_AVX512_FN static __m512 load16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static float one(uint16_t v) { return fp16_to_f32(v); }
};
struct BF16Load16 {
  using T = uint16_t;
  FERRY_AVX512_FN static __m512 load16(const uint16_t* p) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
  static float one(uint16_t v) { return bf16_to_f32(v); }
};

// w: n values, x: NX rows of n values; 32 values per step, two accumulators per row.
template <typename WL, typename XL, int NX>
FERRY_AVX512_FN void float_rows512(int64_t n, const typename WL::T* w, const typename XL::T* const* x,
                                   float* out) {
  __m512 acc0[NX], acc1[NX];
  for (int r = 0; r < NX; ++r) acc0[r] = _mm512_setzero_ps(), acc1[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 w0 = WL::load16(w + i), w1 = WL::load16(w + i + 16);
    for (int r = 0; r < NX; ++r) {
      acc0[r] = _mm512_fmadd_ps(w0, XL::load16(x[r] + i), acc0[r]);
      acc1[r] = _mm512_fmadd_ps(w1, XL::load16(x[r] + i + 16), acc1[r]);
    }
  }
  for (int r = 0; r < NX; ++r) {
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
    for (int64_t j = i; j < n; ++j) sum += WL::one(w[j]) * XL::one(x[r][j]);
    out[r] = sum;
  }
}

// BF16 weights x BF16 activations: vdpbf16ps multiplies 32 bf16 pairs and adds adjacent products in fp32.
template <int NX>
FERRY_AVX512BF16_FN void bf16_rows_dp(int64_t n, const uint16_t* w, const uint16_t* const* x, float* out) {
  __m512 acc0[NX], acc1[NX];
  for (int r = 0; r < NX; ++r) acc0[r] = _mm512_setzero_ps(), acc1[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(w + i);
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(w + i + 32);
    for (int r = 0; r < NX; ++r) {
      acc0[r] = _mm512_dpbf16_ps(acc0[r], w0, (__m512bh)_mm512_loadu_si512(x[r] + i));
      acc1[r] = _mm512_dpbf16_ps(acc1[r], w1, (__m512bh)_mm512_loadu_si512(x[r] + i + 32));
    }
  }
  for (int r = 0; r < NX; ++r) {
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
    for (int64_t j = i; j < n; ++j) sum += bf16_to_f32(w[j]) * bf16_to_f32(x[r][j]);
    out[r] = sum;
  }
}

template <typename WL, typename XL>
__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"))) void float_dot512(
    int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  using XT = typename XL::T;
  const XT* xs[kMaxDotRows] = {};
  for (int j = 0; j < n_x; ++j) xs[j] = x_row<XT>(x, xb, j);
  const auto* wp = static_cast<const typename WL::T*>(w);
  switch (n_x) {
    case 1: float_rows512<WL, XL, 1>(n, wp, xs, out); break;
    case 2: float_rows512<WL, XL, 2>(n, wp, xs, out); break;
    case 3: float_rows512<WL, XL, 3>(n, wp, xs, out); break;
    default: float_rows512<WL, XL, 4>(n, wp, xs, out); break;
  }
}

__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))) void bf16_dot_dp(
    int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  const uint16_t* xs[kMaxDotRows] = {};
  for (int j = 0; j < n_x; ++j) xs[j] = x_row<uint16_t>(x, xb, j);
  const auto* wp = static_cast<const uint16_t*>(w);
  switch (n_x) {
    case 1: bf16_rows_dp<1>(n, wp, xs, out); break;
    case 2: bf16_rows_dp<2>(n, wp, xs, out); break;
    case 3: bf16_rows_dp<3>(n, wp, xs, out); break;
    default: bf16_rows_dp<4>(n, wp, xs, out); break;
  }
}

}  // namespace

void fill_avx512(DotKernels& k, const SimdFeatures& f) {
  if (!f.avx512) return;
  if (f.avx512_vnni) {  // otherwise the AVX2 kernels stay
    fill_x86_quant(k);
    fill_x86_quant512(k);  // Q4_0, Q5_0 on 512-bit vectors
  }
  k.by_weight_type[static_cast<size_t>(DType::F32)] = tile_by_rows<float_dot512<F32Load16, F32Load16>>;
  k.by_weight_type[static_cast<size_t>(DType::F16)] = tile_by_rows<float_dot512<F16Load16, F32Load16>>;
  k.by_weight_type[static_cast<size_t>(DType::BF16)] =
      f.avx512_bf16 ? tile_by_rows<bf16_dot_dp> : tile_by_rows<float_dot512<BF16Load16, BF16Load16>>;
  // 32 vector registers (AVX-512VL reaches ymm16..31): 4 weight rows x 4 tokens = 16 accumulators.
  k.tile_w = 4;
  k.tile_x = 4;
}

}  // namespace ferry::dot_kernels

#else

namespace ferry::dot_kernels {
void fill_avx512(DotKernels&, const SimdFeatures&) {}
}  // namespace ferry::dot_kernels

#endif
