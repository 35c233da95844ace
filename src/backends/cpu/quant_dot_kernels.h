// The per-level kernel tables behind select_dot_kernels (quant_dot.h). Internal to backends/cpu.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/quant_dot.h"

namespace ferry::dot_kernels {

void fill_scalar(DotKernels& k);  // every weight type
void fill_avx2(DotKernels& k);    // overrides with AVX2+FMA+F16C kernels (x86-64 only; no-op elsewhere)
void fill_avx512(DotKernels& k, const SimdFeatures& f);  // overrides with AVX-512 (VNNI/BF16) kernels

// Row j of the activation rows, as a typed pointer.
template <typename T>
inline const T* x_row(const void* x_rows, size_t x_row_bytes, int j) {
  return reinterpret_cast<const T*>(static_cast<const char*>(x_rows) + size_t(j) * x_row_bytes);
}

}  // namespace ferry::dot_kernels
