// Portable dot kernels: integer sums inside each block (inside each group of 4 for the G4 activations),
// then the scales, in plain C++, one weight row at a time (tile_by_rows). They are the fallback for CPUs
// without AVX2 and the model the SIMD kernels follow.
#include <array>
#include <cstring>

#include "backends/cpu/quant_dot_kernels.h"
#include "core/fp16.h"
#include "formats/fp8.h"
#include "formats/quant.h"

namespace ferry::dot_kernels {
namespace {

constexpr int kHalf = kQK / 2;

// Accumulates dot(w block b, x block b) over the row for each of the n_x activation rows.
template <typename W, typename X, int kBlock, typename BlockDot>
void run_blocks(int64_t n, const void* w_row, const void* x_rows, size_t x_row_bytes, int n_x, float* out,
                BlockDot block_dot) {
  const W* w = static_cast<const W*>(w_row);
  const int64_t nb = n / kBlock;
  for (int j = 0; j < n_x; ++j) {
    const X* x = x_row<X>(x_rows, x_row_bytes, j);
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) acc += block_dot(w[b], x[b]);
    out[j] = acc;
  }
}

uint32_t qh_bits(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

void dot_f32(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<float, float, 1>(n, w, x, xb, n_x, out, [](float a, float b) { return a * b; });
}
void dot_f16(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<uint16_t, float, 1>(n, w, x, xb, n_x, out, [](uint16_t a, float b) { return fp16_to_f32(a) * b; });
}
void dot_bf16(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<uint16_t, uint16_t, 1>(n, w, x, xb, n_x, out,
                                    [](uint16_t a, uint16_t b) { return bf16_to_f32(a) * bf16_to_f32(b); });
}

// The 32-value formats against G4 activations: integer sums per group of 4, each scaled by its group's
// activation scale, then by the weight block's scale (plus m * s for Q4_1/Q5_1).
// q(i): the weight block's integer value i (offset included for Q4_0/Q5_0).
template <typename XBlock, typename Quant>
float g4_block_sum(const XBlock& b, Quant q) {
  float sum = 0.0f;
  for (int g = 0; g < kQK / kG4; ++g) {
    int s = 0;
    for (int i = kG4 * g; i < kG4 * (g + 1); ++i) s += q(i) * b.qs[i];
    sum += b.d[g] * float(s);
  }
  return sum;
}

int nibble(const uint8_t* qs, int i) { return i < kHalf ? (qs[i] & 0xF) : (qs[i - kHalf] >> 4); }
int fifth_bit(uint32_t qh, int i) { return int((qh >> i) & 1) << 4; }

void dot_q4_0(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<BlockQ4_0, BlockQ8_0G4, kQK>(n, w, x, xb, n_x, out, [](const BlockQ4_0& a, const BlockQ8_0G4& b) {
    return fp16_to_f32(a.d) * g4_block_sum(b, [&](int i) { return nibble(a.qs, i) - 8; });
  });
}

void dot_q4_1(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<BlockQ4_1, BlockQ8_1G4, kQK>(n, w, x, xb, n_x, out, [](const BlockQ4_1& a, const BlockQ8_1G4& b) {
    return fp16_to_f32(a.d) * g4_block_sum(b, [&](int i) { return nibble(a.qs, i); }) + fp16_to_f32(a.m) * b.s;
  });
}

void dot_q5_0(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<BlockQ5_0, BlockQ8_0G4, kQK>(n, w, x, xb, n_x, out, [](const BlockQ5_0& a, const BlockQ8_0G4& b) {
    const uint32_t qh = qh_bits(a.qh);
    return fp16_to_f32(a.d) * g4_block_sum(b, [&](int i) { return (nibble(a.qs, i) | fifth_bit(qh, i)) - 16; });
  });
}

void dot_q5_1(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<BlockQ5_1, BlockQ8_1G4, kQK>(n, w, x, xb, n_x, out, [](const BlockQ5_1& a, const BlockQ8_1G4& b) {
    const uint32_t qh = qh_bits(a.qh);
    return fp16_to_f32(a.d) * g4_block_sum(b, [&](int i) { return nibble(a.qs, i) | fifth_bit(qh, i); }) +
           fp16_to_f32(a.m) * b.s;
  });
}

void dot_q8_0(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<BlockQ8_0, BlockQ8_0G4, kQK>(n, w, x, xb, n_x, out, [](const BlockQ8_0& a, const BlockQ8_0G4& b) {
    return fp16_to_f32(a.d) * g4_block_sum(b, [&](int i) { return int(a.qs[i]); });
  });
}

void dot_q8_1(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<BlockQ8_1, BlockQ8_1, kQK>(n, w, x, xb, n_x, out, [](const BlockQ8_1& a, const BlockQ8_1& b) {
    int sum = 0;
    for (int j = 0; j < kQK; ++j) sum += a.qs[j] * b.qs[j];
    return float(sum) * fp16_to_f32(a.d) * fp16_to_f32(b.d);
  });
}

void dot_q2_k(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<BlockQ2_K, BlockQ8_K, kQKK>(n, w, x, xb, n_x, out, [](const BlockQ2_K& a, const BlockQ8_K& b) {
    int sum_q = 0, sum_m = 0, g = 0;
    const int8_t* y = b.qs;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = a.qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part, ++g, y += 16) {
          int s = 0;
          for (int l = 0; l < 16; ++l) s += ((q[16 * part + l] >> shift) & 3) * y[l];
          sum_q += (a.scales[g] & 0xF) * s;
          sum_m += (a.scales[g] >> 4) * b.bsums[g];
        }
      }
    }
    return b.d * (fp16_to_f32(a.d) * float(sum_q) - fp16_to_f32(a.dmin) * float(sum_m));
  });
}

void dot_q3_k(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<BlockQ3_K, BlockQ8_K, kQKK>(n, w, x, xb, n_x, out, [](const BlockQ3_K& a, const BlockQ8_K& b) {
    int8_t scales[16];
    q3k_scales(a.scales, scales);
    int sum = 0, g = 0;
    uint8_t mask = 1;
    const int8_t* y = b.qs;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = a.qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2, mask = uint8_t(mask << 1)) {
        for (int part = 0; part < 2; ++part, ++g, y += 16) {
          int s = 0;
          for (int l = 0; l < 16; ++l) {
            const int i = 16 * part + l;
            s += (int((q[i] >> shift) & 3) - ((a.hmask[i] & mask) ? 0 : 4)) * y[l];
          }
          sum += scales[g] * s;
        }
      }
    }
    return b.d * fp16_to_f32(a.d) * float(sum);
  });
}

// Q4_K and Q5_K: 8 groups of 32 with 6-bit scale and min; high_bit(c, l, upper) gives Q5_K's 5th bit.
template <typename Block, typename HighBit>
float k4_block_dot(const Block& a, const BlockQ8_K& b, HighBit high_bit) {
  int sum_q = 0, sum_m = 0;
  for (int c = 0; c < 4; ++c) {
    for (int upper = 0; upper < 2; ++upper) {
      const int g = 2 * c + upper;
      uint8_t sc, mn;
      k4_scale_min(g, a.scales, &sc, &mn);
      const int8_t* y = b.qs + 32 * g;
      int s = 0;
      for (int l = 0; l < 32; ++l) {
        const int q = (upper ? (a.qs[32 * c + l] >> 4) : (a.qs[32 * c + l] & 0xF)) + high_bit(a, c, l, upper);
        s += q * y[l];
      }
      sum_q += sc * s;
      sum_m += mn * (b.bsums[2 * g] + b.bsums[2 * g + 1]);
    }
  }
  return b.d * (fp16_to_f32(a.d) * float(sum_q) - fp16_to_f32(a.dmin) * float(sum_m));
}

void dot_q4_k(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<BlockQ4_K, BlockQ8_K, kQKK>(n, w, x, xb, n_x, out, [](const BlockQ4_K& a, const BlockQ8_K& b) {
    return k4_block_dot(a, b, [](const BlockQ4_K&, int, int, int) { return 0; });
  });
}

void dot_q5_k(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<BlockQ5_K, BlockQ8_K, kQKK>(n, w, x, xb, n_x, out, [](const BlockQ5_K& a, const BlockQ8_K& b) {
    return k4_block_dot(a, b, [](const BlockQ5_K& blk, int c, int l, int upper) {
      return ((blk.qh[l] >> (2 * c + upper)) & 1) << 4;
    });
  });
}

void dot_q6_k(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<BlockQ6_K, BlockQ8_K, kQKK>(n, w, x, xb, n_x, out, [](const BlockQ6_K& a, const BlockQ8_K& b) {
    int sum = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = a.ql + 64 * half;
      const uint8_t* qh = a.qh + 32 * half;
      const int8_t* sc = a.scales + 8 * half;
      const int8_t* y = b.qs + 128 * half;
      int s[8] = {};
      for (int l = 0; l < 32; ++l) {
        const int g = l / 16;
        s[g] += (((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32) * y[l];
        s[g + 2] += (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32) * y[l + 32];
        s[g + 4] += (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * y[l + 64];
        s[g + 6] += (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * y[l + 96];
      }
      for (int g = 0; g < 8; ++g) sum += sc[g] * s[g];
    }
    return b.d * fp16_to_f32(a.d) * float(sum);
  });
}

void dot_q8_k(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  run_blocks<BlockQ8_K, BlockQ8_K, kQKK>(n, w, x, xb, n_x, out, [](const BlockQ8_K& a, const BlockQ8_K& b) {
    int sum = 0;
    for (int j = 0; j < kQKK; ++j) sum += a.qs[j] * b.qs[j];
    return a.d * b.d * float(sum);
  });
}

// F8_E4M3_B128 against f32 activations: per block the weight value e4m3(q) * d (the f32 product dequantize_row
// gives), times x, accumulated in order.
void dot_f8_e4m3_b128(int64_t n, const void* w, const void* x, size_t xb, int n_x, float* out) {
  static const std::array<float, 256> lut = fp8_e4m3_table();
  const auto* blocks = static_cast<const BlockF8E4M3B128*>(w);
  const int64_t nb = n / kF8Block;
  for (int j = 0; j < n_x; ++j) {
    const float* xr = x_row<float>(x, xb, j);
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      float d;
      std::memcpy(&d, &blocks[b].d, 4);
      for (int i = 0; i < kF8Block; ++i) acc += lut[blocks[b].qs[i]] * d * xr[b * kF8Block + i];
    }
    out[j] = acc;
  }
}

}  // namespace

void fill_scalar(DotKernels& k) {
  auto set = [&](DType t, DotFn fn) { k.by_weight_type[static_cast<size_t>(t)] = fn; };
  k.tile_w = 1;
  k.tile_x = kMaxDotRows;
  k.quantize_q8_0g4 = nullptr;
  k.quantize_q8_1g4 = nullptr;
  set(DType::F32, tile_by_rows<dot_f32>);
  set(DType::F16, tile_by_rows<dot_f16>);
  set(DType::BF16, tile_by_rows<dot_bf16>);
  set(DType::Q4_0, tile_by_rows<dot_q4_0>);
  set(DType::Q4_1, tile_by_rows<dot_q4_1>);
  set(DType::Q5_0, tile_by_rows<dot_q5_0>);
  set(DType::Q5_1, tile_by_rows<dot_q5_1>);
  set(DType::Q8_0, tile_by_rows<dot_q8_0>);
  set(DType::Q8_1, tile_by_rows<dot_q8_1>);
  set(DType::Q2_K, tile_by_rows<dot_q2_k>);
  set(DType::Q3_K, tile_by_rows<dot_q3_k>);
  set(DType::Q4_K, tile_by_rows<dot_q4_k>);
  set(DType::Q5_K, tile_by_rows<dot_q5_k>);
  set(DType::Q6_K, tile_by_rows<dot_q6_k>);
  set(DType::Q8_K, tile_by_rows<dot_q8_k>);
  set(DType::F8_E4M3_B128, tile_by_rows<dot_f8_e4m3_b128>);
}

}  // namespace ferry::dot_kernels
