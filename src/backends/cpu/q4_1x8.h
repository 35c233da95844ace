// Q4_1 weights repacked at load, 8 weight rows interleaved per 32-value block, for the AVX-512 VNNI
// matmul (CpuBackend::prepare_weight repacks; matmul_fast and embedding read the repacked form).
//
// Why: in the row-major tile (quant_dot_x86.h, g4_tile) an int32 lane is one group of 4 values of one
// (weight row, token), so each (row, token, block) needs its own vector product dw x dx[8] before the FMA:
// vpdpbusd + cvt + mul + fma, and the multiply pipes bound the kernel (docs/perf-log.md). Here a lane is a
// weight row: vpdpbusd multiplies 8 rows' 4 values of group g by the token's 4 values of group g (one
// broadcast dword), so the group's activation scale dx[g] is a scalar shared by all 8 lanes (an FMA with a
// broadcast operand), and the weight scales dw (one per row: a vector) multiply once per (token, block).
// Per (8 rows, token, group): vpdpbusd + cvt + fma; no per-group multiply.
//
// Layout, per group of 8 rows (rows 8p..8p+7; missing rows past n_out are zero: d = m = 0), per block b:
//   d[8], m[8]  fp16 scale and min of row 8p + r (as in BlockQ4_1)
//   q[j][32]    j = 0..3: byte 4r + i = value(row r, 4j + i) | value(row r, 16 + 4j + i) << 4
//               (low nibbles: group j, high nibbles: group j + 4; values 0..15 as in BlockQ4_1)
// Blocks of one row group are contiguous (b = 0..nb-1), groups follow each other: the same bytes as the
// Q4_1 rows (20 per row and block), so a repacked matrix has the size of the original (plus the padding).
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/quant.h"

namespace ferry {

inline constexpr int kQ41x8Rows = 8;

struct BlockQ4_1x8 {
  uint16_t d[kQ41x8Rows];
  uint16_t m[kQ41x8Rows];
  uint8_t q[4][32];
};
static_assert(sizeof(BlockQ4_1x8) == kQ41x8Rows * sizeof(BlockQ4_1));

// Q4_0 weights use the same layout and kernel: d * (q - 8) = d * q + m with m = -8 d, exact in fp16 (a
// power-of-two multiple) unless |d| >= 8192 (then the matrix is not repacked). The Q4_0 original is
// rebuilt from d alone.

// Whether weights of type t can be repacked (Q4_1, Q4_0).
inline bool q4_x8_type(DType t) { return t == DType::Q4_1 || t == DType::Q4_0; }

// Bytes of the repacked form of an (n_out, n_in) Q4_1 / Q4_0 matrix: ceil(n_out / 8) * (n_in / 32) blocks.
size_t q4_1x8_bytes(int64_t n_out, int64_t n_in);

// w: n_out rows of n_in values of type t (Q4_1 or Q4_0; row-major, as stored) -> dst: q4_1x8_bytes(n_out,
// n_in) bytes. Returns false (dst partly written) for a Q4_0 scale whose -8 d does not fit fp16.
bool repack_q4_1x8(DType t, const void* w, int64_t n_out, int64_t n_in, BlockQ4_1x8* dst);

// Row `row` of a repacked matrix of type t as floats (n_in of them): the same values as dequantize_row(t)
// of the original row (it rebuilds the row's blocks and dequantizes those).
void dequantize_q4_1x8_row(DType t, const BlockQ4_1x8* w, int64_t n_in, int64_t row, float* dst);

// One row group x up to 4 tokens: out[t * ld + r] = dot(row r of the group, token t) for r < n_rows (1..8),
// t < n_x (1..4). w: the group's n_in / 32 blocks; x: n_x activation rows of Q8_1G4 blocks, x_row_bytes
// apart. Every (row, token) pair runs the same operations whatever n_x and n_rows are (batch invariance).
// AVX-512 VNNI only: callers check q4_1x8_supported.
void q4_1x8_dot(int64_t n_in, const BlockQ4_1x8* w, const void* x, size_t x_row_bytes, int n_x, int n_rows,
                float* out, size_t ld);
bool q4_1x8_supported();  // this CPU has AVX-512 F/BW/VL and VNNI

}  // namespace ferry
