#include "backends/cpu/vec_kernels.h"

#include "backends/cpu/vec_kernels_levels.h"
#include "core/check.h"

namespace ferry {

VecKernels select_vec_kernels(SimdLevel level) {
  FERRY_CHECK(cpu_supports(level), "SIMD level {} is not supported by this CPU", simd_level_name(level));
  VecKernels k;
  k.level = level;
  vec_kernels::fill_scalar(k);
  if (level == SimdLevel::Avx2) vec_kernels::fill_avx2(k);
  if (level == SimdLevel::Avx512) vec_kernels::fill_avx512(k);
  return k;
}

}  // namespace ferry
