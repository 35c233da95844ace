// Dot products of a tile of weight rows with a tile of activation rows: what the CPU matmul is built from.
//
// Reference (the oracle): dot_ref dequantizes the weight row and accumulates w[i] * x[i] in float, in order.
// Fast: the activation rows are first converted once with quantize_activations (= quantize_row to
// activation_type(wt), SIMD where there is a kernel); then the kernel for wt chosen by select_dot_kernels
// multiplies a tile of up to kMaxDotWeightRows weight rows by up to kMaxDotRows activation rows: integer
// multiply-adds inside a block (maddubs / vpdpbusd, as llama.cpp does), scaled by the block scales and
// accumulated in float. In a tile each unpacked weight block serves every token and each loaded activation
// block every weight row, which is what makes prompts fast.
//
// For the 32-value weight formats the activations carry one scale per 4 values (Q8_0G4 / Q8_1G4): a SIMD
// int32 lane sums exactly 4 consecutive products, so the finer scales cost one vector multiply per block.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "backends/cpu/simd.h"
#include "core/dtype.h"

namespace ferry {

inline constexpr int kMaxDotRows = 4;          // most activation rows (tokens) one call takes
inline constexpr int kMaxDotWeightRows = 4;    // most weight rows one call takes
// Kernel table size: indexed by the DType value up to F8_E4M3_B128 (F32 .. Q8_K and F8_E4M3_B128 have kernels; the
// integer and activation types between them stay null).
inline constexpr int kNumDotWeightTypes = int(DType::F8_E4M3_B128) + 1;

// One tile: out[j * out_stride + i] = dot(weight row i, activation row j), i < n_w, j < n_x.
struct DotTile {
  int64_t n = 0;             // values per row: whole weight blocks and whole activation blocks
  const void* w = nullptr;   // n_w rows of n weight values, row i at (const char*)w + i * w_row_bytes
  size_t w_row_bytes = 0;
  int n_w = 1;               // 1..kMaxDotWeightRows
  const void* x = nullptr;   // n_x rows of n values of activation_type(wt), row j at x + j * x_row_bytes
  size_t x_row_bytes = 0;
  int n_x = 1;               // 1..kMaxDotRows
  float* out = nullptr;      // token-major, as the matmul output (n_tokens, n_out): out[j * out_stride + i]
  size_t out_stride = 0;     // floats between the rows of out (>= n_w when n_x > 1)
};

using DotFn = void (*)(const DotTile& tile);

// x: n floats -> dst: row_bytes(activation type, n) bytes, byte-identical to quantize_row.
using QuantizeActFn = void (*)(const float* x, void* dst, int64_t n);

struct DotKernels {
  SimdLevel level = SimdLevel::Scalar;
  std::array<DotFn, kNumDotWeightTypes> by_weight_type{};  // indexed by the DType value; null = none
  QuantizeActFn quantize_q8_0g4 = nullptr;                 // null: quantize_row
  QuantizeActFn quantize_q8_1g4 = nullptr;
  // The tile a matmul should ask for at this level (register budget: 16 ymm for AVX2, 32 with AVX-512).
  int tile_w = 1;
  int tile_x = kMaxDotRows;
};

// The type activations are converted to for weight type wt: Q8_0G4 for Q4_0/Q5_0/Q8_0, Q8_1G4 for
// Q4_1/Q5_1, Q8_1 for Q8_1, Q8_K for the K-quants, F32 for F32/F16/F8_E4M3_B128 weights, BF16 for BF16 weights
// (as ggml: vdpbf16ps multiplies bf16 pairs). Throws ferry::Error for a type with no dot product (I8, F64, ...).
DType activation_type(DType wt);

// w_row: n values of type wt; x: n floats. Dequantize-then-multiply, float accumulation in order.
float dot_ref(DType wt, const void* w_row, const float* x, int64_t n);

// The kernels for `level`; throws ferry::Error naming the level when this CPU lacks it. Within Avx512,
// VNNI and BF16 instructions are used only where the CPU has them.
DotKernels select_dot_kernels(SimdLevel level);

// The kernel for weight type wt (throws ferry::Error when there is none). A matmul validates its shapes
// once, takes this pointer, and calls it per tile without further checks.
DotFn dot_kernel(const DotKernels& k, DType wt);

// x: n floats -> dst: row_bytes(at, n) bytes; the same bytes as quantize_row(at, x, dst, n).
void quantize_activations(const DotKernels& k, DType at, const float* x, void* dst, int64_t n);

// Runs the kernel for wt on one tile after checking it (n_w, n_x, block multiples, row spacing).
void dot_tile(const DotKernels& k, DType wt, const DotTile& tile);

// out[j] = dot(w_row, x row j) for j < n_x (1..kMaxDotRows): dot_tile with one weight row.
void dot_rows(const DotKernels& k, DType wt, int64_t n, const void* w_row, const void* x_rows,
              size_t x_row_bytes, int n_x, float* out);

}  // namespace ferry
