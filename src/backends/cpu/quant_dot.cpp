#include "backends/cpu/quant_dot.h"

#include <vector>

#include "backends/cpu/quant_dot_kernels.h"
#include "core/check.h"
#include "formats/quant.h"

namespace ferry {

DType activation_type(DType wt) {
  switch (wt) {
    case DType::F32: case DType::F16: return DType::F32;
    case DType::BF16: return DType::BF16;
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: return DType::Q8_0;
    case DType::Q4_1: case DType::Q5_1: case DType::Q8_1: return DType::Q8_1;
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
    case DType::Q8_K: return DType::Q8_K;
    default: fail("no dot product for weights of type {}", dtype_name(wt));
  }
}

float dot_ref(DType wt, const void* w_row, const float* x, int64_t n) {
  std::vector<float> w(size_t(n > 0 ? n : 0));
  dequantize_row(wt, w_row, w.data(), n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += w[size_t(i)] * x[i];
  return sum;
}

DotKernels select_dot_kernels(SimdLevel level) {
  FERRY_CHECK(cpu_supports(level), "SIMD level {} is not supported by this CPU", simd_level_name(level));
  DotKernels k;
  k.level = level;
  dot_kernels::fill_scalar(k);
  if (level == SimdLevel::Avx2 || level == SimdLevel::Avx512) dot_kernels::fill_avx2(k);
  if (level == SimdLevel::Avx512) dot_kernels::fill_avx512(k, detect_simd_features());
  return k;
}

DotFn dot_kernel(const DotKernels& k, DType wt) {
  const size_t t = static_cast<size_t>(wt);
  FERRY_CHECK(t < k.by_weight_type.size() && k.by_weight_type[t] != nullptr,
              "no dot product kernel for weights of type {}", dtype_name(wt));
  return k.by_weight_type[t];
}

void dot_rows(const DotKernels& k, DType wt, int64_t n, const void* w_row, const void* x_rows,
              size_t x_row_bytes, int n_x, float* out) {
  FERRY_CHECK(n_x >= 1 && n_x <= kMaxDotRows, "dot_rows takes 1 to {} activation rows, got {}", kMaxDotRows,
              n_x);
  const DotFn fn = dot_kernel(k, wt);
  const int64_t block = dtype_info(activation_type(wt)).block_elems;
  FERRY_CHECK(n >= 0 && n % dtype_info(wt).block_elems == 0 && n % block == 0,
              "dot of {} values of type {} is not a whole number of blocks", n, dtype_name(wt));
  FERRY_CHECK(n_x == 1 || x_row_bytes >= row_bytes(activation_type(wt), n),
              "activation rows {} bytes apart overlap ({} bytes each)", x_row_bytes,
              row_bytes(activation_type(wt), n));
  fn(n, w_row, x_rows, x_row_bytes, n_x, out);
}

}  // namespace ferry
