// The vec kernels for the AVX-512 level: vec_kernels_impl.h over __m128 / __m256 / __m512 (AVX-512
// F/BW/VL/DQ; vscalefps for 2^n).
#include "backends/cpu/vec_kernels_levels.h"

#if defined(__x86_64__)

// Vector arguments between these internal functions: the ABI note is about external callers; there are none.
#pragma GCC diagnostic ignored "-Wpsabi"

// GCC 12's avx512fintrin.h trips -Wuninitialized on its own _mm512_undefined_* helpers (a known false
// positive when the intrinsics are inlined into target("avx512f") functions).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define FERRY_VEC_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"))) inline
#define FERRY_VEC_AVX512 1
// The standard headers first, outside the target region (their inline functions must stay portable).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

// Everything defined below up to pop_options, the lambdas inside the kernels included, is compiled for this
// level: a lambda without the target attribute receives vectors in the wrong ABI when it is not inlined
// (seen under -O0 in the sanitizer build: garbage tail counts in load_n).
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#include "backends/cpu/vec_types_x86.h"
#include "backends/cpu/vec_kernels_impl.h"
#pragma GCC pop_options

namespace ferry::vec_kernels {

void fill_avx512(VecKernels& k) {
  k.attention_max_rows = 2 * X16::kW;
  k.attention = attention_dispatch<X4, X8, X16, X16>;
  k.exp = exp_n<X16>;
  k.swiglu = swiglu_n<X16>;
  k.rms_norm = rms_norm_n<X16>;
  k.add_rms_norm = add_rms_norm_n<X16>;
}

}  // namespace ferry::vec_kernels

#else

namespace ferry::vec_kernels {
void fill_avx512(VecKernels&) {}
}  // namespace ferry::vec_kernels

#endif
