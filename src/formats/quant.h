// GGML's quantized block formats, laid out byte for byte as ggml defines them (ggml-common.h), and the
// row-level conversions: dequantize_row (bit-exact with ggml's dequantize_row_*) and quantize_row
// (ggml's round-to-nearest *_ref quantizers for the 32-value formats and Q8_K; for Q2_K..Q6_K an
// error-minimizing scale search per group, quant_kquants_fit.cpp).
//
// fp16 fields are stored as raw IEEE binary16 bits (uint16_t); use core/fp16.h to convert.
// A "row" is n consecutive values; for a quantized type it is n / block_elems consecutive blocks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace ferry {

inline constexpr int kQK = 32;    // values per block of the 32-value formats (Q4_0 ... Q8_1)
inline constexpr int kQKK = 256;  // values per super-block of the K-quants
inline constexpr int kKScaleBytes = 12;  // packed 6-bit scales/mins of Q3_K, Q4_K, Q5_K

// value i = d * ((qs[i % 16] >> (4 * (i / 16))) & 0xF) - 8): low nibbles are values 0..15, high 16..31.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// value i = d * nibble(i) + m
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
// value i = d * ((nibble(i) | bit_i(qh) << 4) - 16); qh is a little-endian u32, bit i belongs to value i.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// value i = d * (nibble(i) | bit_i(qh) << 4) + m
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// value i = d * qs[i]
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
// value i = d * qs[i]; s = d * sum(qs) (an fp16), used by the Q4_1/Q5_1 dot products for the m term.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK];
};
// 16 groups of 16: value = d * (scales[g] & 0xF) * q - dmin * (scales[g] >> 4), q 2 bits.
// Per 128-value half h: byte l of qs[32h .. 32h+31] holds, at bit shift 2s, value 128h + 32s + l.
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;
  uint16_t dmin;
};
// 16 groups of 16: value = d * (scale6[g] - 32) * (q2 - (hmask bit set ? 0 : 4)).
// q2 laid out as Q2_K's qs; the high bit of value 128h + 32s + l is bit (4h + s) of hmask[l].
// scale6[g]: low 4 bits from scales[g] (g < 8) or scales[g-8] >> 4; high 2 bits from
// (scales[8 + g % 4] >> (2 * (g / 4))) & 3.
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[kKScaleBytes];
  uint16_t d;
};
// 8 groups of 32: value = d * sc[g] * q - dmin * mn[g], q 4 bits, (sc, mn) 6 bits each (get_scale_min_k4).
// Per 64-value chunk c: qs[32c + l] low nibble is value 64c + l, high nibble value 64c + 32 + l.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQKK / 2];
};
// As Q4_K with a 5th bit: value 64c + l takes bit 2c of qh[l], value 64c + 32 + l bit 2c + 1.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
// 16 groups of 16: value = d * scales[g] * (q6 - 32). Per 128-value half h (ql += 64h, qh += 32h), l < 32:
// value l: ql[l] & 0xF | (qh[l] & 3) << 4;          value 32 + l: ql[32 + l] & 0xF | (qh[l] >> 2 & 3) << 4;
// value 64 + l: ql[l] >> 4 | (qh[l] >> 4 & 3) << 4;  value 96 + l: ql[32 + l] >> 4 | (qh[l] >> 6 & 3) << 4.
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
// value i = d * qs[i]; bsums[g] = sum of qs[16g .. 16g+15]. Activations for the K-quant dot products.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

// ferry's activation formats for the CPU dot kernels (not GGUF types): one float scale per group of 4
// values, so an outlier channel only coarsens its own group. value i = d[i / 4] * qs[i]. The SIMD kernels'
// int32 lanes each hold the sum of 4 consecutive products, so lane g meets exactly scale d[g].
inline constexpr int kG4 = 4;  // values per scale group
struct BlockQ8_0G4 {
  float d[kQK / kG4];
  int8_t qs[kQK];
};
// As BlockQ8_0G4 plus s = sum of the 32 dequantized values (float), for the m term of Q4_1/Q5_1 weights.
struct BlockQ8_1G4 {
  float d[kQK / kG4];
  int8_t qs[kQK];
  float s;
};

// ferry's block of FP8 checkpoint weights (F8_E4M3_B128; not a GGUF type): value i = e4m3(qs[i]) * d, e4m3 as
// formats/fp8.h decodes it, the product in f32 (what torch computes for weight.to(float32) * scale). Every FP8
// checkpoint layout maps onto it exactly (model/fp8_weights.h): per-channel (every block of row r carries scale[r]),
// block-wise with 128-multiple column blocks (block (r, c / 128) carries scale_inv[r / br][c / bc]), per-tensor (every
// block the one scale). Why 128 codes then the scale: 128 is the checkpoints' block width (DeepSeek-V3, Qwen3-FP8),
// so no checkpoint scale is ever split or repeated within a block; the codes first keep them at a 4-byte-aligned
// offset of every block (132 = 33 x 4, the scale too), and the CUDA layout splits codes from scales anyway
// (backends/cuda/matmul/weight_layout.cuh). 1.03 bytes a weight.
inline constexpr int kF8Block = 128;  // values per F8_E4M3_B128 block
struct BlockF8E4M3B128 {
  uint8_t qs[kF8Block];  // e4m3 codes
  float d;               // the block's scale
};

static_assert(sizeof(BlockF8E4M3B128) == 132);
static_assert(sizeof(BlockQ8_0G4) == 64);
static_assert(sizeof(BlockQ8_1G4) == 68);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// src: n values of type t (n / block_elems blocks); dst: n floats. Supports F32, F16, BF16 and all the
// block formats above (the G4 activation formats and F8_E4M3_B128 included). Throws ferry::Error if n is negative or not a whole number of blocks.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// src: n floats; dst: row_bytes(t, n) bytes. Supports F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
// Q8_K, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_0G4, Q8_1G4 (per group of 4: scale amax / 127, q = round-half-even(x / scale);
// a group of zeros gets scale 0), F8_E4M3_B128 (per block: d = amax / 448, q = the nearest e4m3 code of x / d, ties
// to even; a block of zeros gets d = 0 and codes 0). Throws ferry::Error for other types or a partial block.
void quantize_row(DType t, const float* src, void* dst, int64_t n);

// Whether quantize_row supports t.
bool can_quantize(DType t);

// Q4_K/Q5_K 6-bit scale and min of group j (0..7) from the 12 packed bytes (ggml's get_scale_min_k4).
inline void k4_scale_min(int j, const uint8_t* packed, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = uint8_t((packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4));
    *min = uint8_t((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
  }
}

// Q3_K's 16 scales, unpacked from 12 bytes and offset to -32..31.
inline void q3k_scales(const uint8_t* packed, int8_t* out /* [16] */) {
  for (int g = 0; g < 16; ++g) {
    const int low = g < 8 ? (packed[g] & 0xF) : (packed[g - 8] >> 4);
    const int high = (packed[8 + g % 4] >> (2 * (g / 4))) & 3;
    out[g] = int8_t((low | (high << 4)) - 32);
  }
}

}  // namespace ferry
