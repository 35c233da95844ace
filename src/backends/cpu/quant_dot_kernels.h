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

// A kernel over one weight row: w_row: n values; x_rows: n_x rows x_row_bytes apart; out: [n_x].
using RowDotFn = void (*)(int64_t n, const void* w_row, const void* x_rows, size_t x_row_bytes, int n_x,
                          float* out);

// A tile kernel made of a row kernel, one weight row at a time (the types without a tiled kernel).
template <RowDotFn kRow>
void tile_by_rows(const DotTile& p) {
  for (int i = 0; i < p.n_w; ++i) {
    float tmp[kMaxDotRows];
    kRow(p.n, static_cast<const char*>(p.w) + size_t(i) * p.w_row_bytes, p.x, p.x_row_bytes, p.n_x, tmp);
    for (int j = 0; j < p.n_x; ++j) p.out[size_t(j) * p.out_stride + size_t(i)] = tmp[j];
  }
}

}  // namespace ferry::dot_kernels
