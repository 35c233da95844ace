// Dot products of one weight row with 1..4 activation rows: what the CPU matmul is built from.
//
// Reference (the oracle): dot_ref dequantizes the weight row and accumulates w[i] * x[i] in float, in order.
// Fast: the activation rows are first converted once with quantize_row(activation_type(wt), ...); then
// dot_rows runs the kernel for wt chosen by select_dot_kernels: integer multiply-adds inside a block
// (maddubs / vpdpbusd, as llama.cpp does), scaled by the block scales and accumulated in float. Several
// activation rows (tokens) share one pass over the weight row, which is what makes prompts fast.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "backends/cpu/simd.h"
#include "core/dtype.h"

namespace ferry {

inline constexpr int kMaxDotRows = 4;         // most activation rows one dot_rows call takes
inline constexpr int kNumDotWeightTypes = 15;  // DType::F32 .. DType::Q8_K (the enum's first 15 values)

// n: values per row (a whole number of weight blocks, and of activation blocks).
// w_row: n values of the weight type. x_rows: n_x rows of the activation type, row j starting at
// (const char*)x_rows + j * x_row_bytes. out: [n_x] floats, out[j] = dot(w_row, x row j).
using DotFn = void (*)(int64_t n, const void* w_row, const void* x_rows, size_t x_row_bytes, int n_x,
                       float* out);

struct DotKernels {
  SimdLevel level = SimdLevel::Scalar;
  std::array<DotFn, kNumDotWeightTypes> by_weight_type{};  // indexed by the DType value; null = none
};

// The type activations are converted to for weight type wt: Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for
// Q4_1/Q5_1/Q8_1, Q8_K for the K-quants, F32 for F32/F16 weights, BF16 for BF16 weights (as ggml:
// vdpbf16ps multiplies bf16 pairs). Throws ferry::Error for a type with no dot product (I8, F64, ...).
DType activation_type(DType wt);

// w_row: n values of type wt; x: n floats. Dequantize-then-multiply, float accumulation in order.
float dot_ref(DType wt, const void* w_row, const float* x, int64_t n);

// The kernels for `level`; throws ferry::Error naming the level when this CPU lacks it. Within Avx512,
// VNNI and BF16 instructions are used only where the CPU has them.
DotKernels select_dot_kernels(SimdLevel level);

// The kernel for weight type wt (throws ferry::Error when there is none). A matmul validates its shapes
// once, takes this pointer, and calls it per weight row without further checks.
DotFn dot_kernel(const DotKernels& k, DType wt);

// out[j] = dot(w_row, x row j) for j < n_x (1..kMaxDotRows). x rows are of type activation_type(wt),
// x_row_bytes apart. Checks n_x, the block multiple of n, and that wt has a kernel.
void dot_rows(const DotKernels& k, DType wt, int64_t n, const void* w_row, const void* x_rows,
              size_t x_row_bytes, int n_x, float* out);

}  // namespace ferry
