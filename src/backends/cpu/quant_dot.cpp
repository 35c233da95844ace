#include "backends/cpu/quant_dot.h"

#include <vector>

#include "backends/cpu/quant_dot_kernels.h"
#include "core/check.h"
#include "formats/quant.h"

namespace ferry {

DType activation_type(DType wt) {
  switch (wt) {
    case DType::F32: case DType::F16: case DType::F8_E4M3_B128: return DType::F32;
    case DType::BF16: return DType::BF16;
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: return DType::Q8_0G4;
    case DType::Q4_1: case DType::Q5_1: return DType::Q8_1G4;
    case DType::Q8_1: return DType::Q8_1;
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

void quantize_activations(const DotKernels& k, DType at, const float* x, void* dst, int64_t n) {
  const QuantizeActFn fn = at == DType::Q8_0G4 ? k.quantize_q8_0g4 : at == DType::Q8_1G4 ? k.quantize_q8_1g4 : nullptr;
  if (fn == nullptr || n % dtype_info(at).block_elems != 0) return quantize_row(at, x, dst, n);
  fn(x, dst, n);
}

void dot_tile(const DotKernels& k, DType wt, const DotTile& p) {
  FERRY_CHECK(p.n_x >= 1 && p.n_x <= kMaxDotRows, "a dot tile takes 1 to {} activation rows, got {}", kMaxDotRows,
              p.n_x);
  FERRY_CHECK(p.n_w >= 1 && p.n_w <= kMaxDotWeightRows, "a dot tile takes 1 to {} weight rows, got {}",
              kMaxDotWeightRows, p.n_w);
  const DotFn fn = dot_kernel(k, wt);
  const DType at = activation_type(wt);
  FERRY_CHECK(p.n >= 0 && p.n % dtype_info(wt).block_elems == 0 && p.n % dtype_info(at).block_elems == 0,
              "dot of {} values of type {} is not a whole number of blocks", p.n, dtype_name(wt));
  FERRY_CHECK(p.n_x == 1 || p.x_row_bytes >= row_bytes(at, p.n),
              "activation rows {} bytes apart overlap ({} bytes each)", p.x_row_bytes, row_bytes(at, p.n));
  FERRY_CHECK(p.n_w == 1 || p.w_row_bytes >= row_bytes(wt, p.n), "weight rows {} bytes apart overlap ({} bytes each)",
              p.w_row_bytes, row_bytes(wt, p.n));
  FERRY_CHECK(p.n_x == 1 || p.out_stride >= size_t(p.n_w), "output rows {} floats apart overlap ({} each)",
              p.out_stride, p.n_w);
  fn(p);
}

void dot_rows(const DotKernels& k, DType wt, int64_t n, const void* w_row, const void* x_rows,
              size_t x_row_bytes, int n_x, float* out) {
  dot_tile(k, wt, {.n = n, .w = w_row, .w_row_bytes = 0, .n_w = 1, .x = x_rows, .x_row_bytes = x_row_bytes,
                   .n_x = n_x, .out = out, .out_stride = 1});
}

}  // namespace ferry
