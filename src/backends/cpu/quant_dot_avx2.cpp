// AVX2 + FMA + F16C dot kernels: the quantized formats through quant_dot_x86.h (maddubs + madd), and the
// float weight types (F32, F16, F8_E4M3_B128 with F32 activations; BF16 with BF16 activations) here.
#include "backends/cpu/quant_dot_kernels.h"

#if defined(__x86_64__)

#define FERRY_X86_TARGET "avx2,fma,f16c"
#define FERRY_X86_VNNI 0
#include "backends/cpu/quant_dot_x86.h"
#include <cstring>

#include "core/fp16.h"
#include "formats/quant.h"

namespace ferry::dot_kernels {
namespace {

struct F32Load {
  using T = float;
  FERRY_X86_FN static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static float one(float v) { return v; }
};
struct F16Load {
  using T = uint16_t;
  FERRY_X86_FN static __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float one(uint16_t v) { return fp16_to_f32(v); }
};
struct BF16Load {
  using T = uint16_t;
  FERRY_X86_FN static __m256 load8(const uint16_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static float one(uint16_t v) { return bf16_to_f32(v); }
};

// w: n values (WL::T), x: NX rows of n values (XL::T); two accumulators per row hide the FMA latency.
template <typename WL, typename XL, int NX>
FERRY_X86_FN void float_rows(int64_t n, const typename WL::T* w, const typename XL::T* const* x, float* out) {
  __m256 acc0[NX], acc1[NX];
  for (int r = 0; r < NX; ++r) acc0[r] = _mm256_setzero_ps(), acc1[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 w0 = WL::load8(w + i), w1 = WL::load8(w + i + 8);
    for (int r = 0; r < NX; ++r) {
      acc0[r] = _mm256_fmadd_ps(w0, XL::load8(x[r] + i), acc0[r]);
      acc1[r] = _mm256_fmadd_ps(w1, XL::load8(x[r] + i + 8), acc1[r]);
    }
  }
  for (int r = 0; r < NX; ++r) {
    float sum = hsum(_mm256_add_ps(acc0[r], acc1[r]));
    for (int64_t j = i; j < n; ++j) sum += WL::one(w[j]) * XL::one(x[r][j]);
    out[r] = sum;
  }
}

template <typename WL, typename XL>
__attribute__((target(FERRY_X86_TARGET))) void float_dot(int64_t n, const void* w, const void* x, size_t xb,
                                                          int n_x, float* out) {
  using XT = typename XL::T;
  const XT* xs[kMaxDotRows] = {};
  for (int j = 0; j < n_x; ++j) xs[j] = x_row<XT>(x, xb, j);
  const auto* wp = static_cast<const typename WL::T*>(w);
  switch (n_x) {
    case 1: float_rows<WL, XL, 1>(n, wp, xs, out); break;
    case 2: float_rows<WL, XL, 2>(n, wp, xs, out); break;
    case 3: float_rows<WL, XL, 3>(n, wp, xs, out); break;
    default: float_rows<WL, XL, 4>(n, wp, xs, out); break;
  }
}

// 16 e4m3 codes -> their f16 bit patterns / 256, exactly: S.EEEE.MMM becomes S.0EEEE.MMM0000000, an f16 of the
// same sign, exponent field and mantissa, whose value is the e4m3 value times 2^-8 (bias 15 instead of 7;
// subnormals alike: both formats' exponent-0 values are mantissa-scaled, f16 holds them as subnormals, which F16C
// converts exactly). The NaN codes S.1111.111 become an f16 NaN.
FERRY_X86_FN __m256i e4m3x16_to_f16_over_256(const uint8_t* p) {
  const __m256i q = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i mag = _mm256_and_si256(q, _mm256_set1_epi16(0x7F));
  const __m256i h = _mm256_or_si256(_mm256_slli_epi16(mag, 7), _mm256_slli_epi16(_mm256_and_si256(q, _mm256_set1_epi16(0x80)), 8));
  const __m256i nan = _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F));
  return _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7E00)));
}

// F8_E4M3_B128 weights x NX rows of f32 activations: per block, w = (e4m3(q) / 256) * (256 d), which is exactly
// e4m3(q) * d (dequantize_row's f32 product: scaling by a power of two is exact; d below 2^119), FMA'd into two accumulators per row.
template <int NX>
FERRY_X86_FN void f8_rows(int64_t n, const BlockF8E4M3B128* w, const float* const* x, float* out) {
  __m256 acc0[NX], acc1[NX];
  for (int r = 0; r < NX; ++r) acc0[r] = _mm256_setzero_ps(), acc1[r] = _mm256_setzero_ps();
  const int64_t nb = n / kF8Block;
  for (int64_t b = 0; b < nb; ++b) {
    float dv;
    std::memcpy(&dv, &w[b].d, 4);
    const __m256 d = _mm256_set1_ps(dv * 256.0f);
    const int64_t base = b * kF8Block;
    for (int i = 0; i < kF8Block; i += 16) {
      const __m256i h = e4m3x16_to_f16_over_256(w[b].qs + i);
      const __m256 w0 = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), d);
      const __m256 w1 = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), d);
      for (int r = 0; r < NX; ++r) {
        acc0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[r] + base + i), acc0[r]);
        acc1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[r] + base + i + 8), acc1[r]);
      }
    }
  }
  for (int r = 0; r < NX; ++r) out[r] = hsum(_mm256_add_ps(acc0[r], acc1[r]));
}

__attribute__((target(FERRY_X86_TARGET))) void f8_dot(int64_t n, const void* w, const void* x, size_t xb, int n_x,
                                                       float* out) {
  const float* xs[kMaxDotRows] = {};
  for (int j = 0; j < n_x; ++j) xs[j] = x_row<float>(x, xb, j);
  const auto* wp = static_cast<const BlockF8E4M3B128*>(w);
  switch (n_x) {
    case 1: f8_rows<1>(n, wp, xs, out); break;
    case 2: f8_rows<2>(n, wp, xs, out); break;
    case 3: f8_rows<3>(n, wp, xs, out); break;
    default: f8_rows<4>(n, wp, xs, out); break;
  }
}

}  // namespace

void fill_avx2(DotKernels& k) {
  fill_x86_quant(k);
  k.by_weight_type[static_cast<size_t>(DType::F32)] = tile_by_rows<float_dot<F32Load, F32Load>>;
  k.by_weight_type[static_cast<size_t>(DType::F16)] = tile_by_rows<float_dot<F16Load, F32Load>>;
  k.by_weight_type[static_cast<size_t>(DType::BF16)] = tile_by_rows<float_dot<BF16Load, BF16Load>>;
  k.by_weight_type[static_cast<size_t>(DType::F8_E4M3_B128)] = tile_by_rows<f8_dot>;
  // 16 ymm registers: 2 weight rows x 4 tokens = 8 accumulators + 4 activation blocks and their scales.
  k.tile_w = 2;
  k.tile_x = 4;
}

}  // namespace ferry::dot_kernels

#else

namespace ferry::dot_kernels {
void fill_avx2(DotKernels&) {}
}  // namespace ferry::dot_kernels

#endif
