// dequantize_row against values worked out from the format definitions (ggml-common.h), block by block.
// Each test builds a block from chosen bytes, then computes the expected floats with the spec's formula
// written per element (not per loop of the implementation), plus literal values worked out by hand.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/fp16.h"
#include "formats/quant.h"

namespace ferry {
namespace {

constexpr uint16_t kH1 = 0x3C00;     // fp16 1.0
constexpr uint16_t kHHalf = 0x3800;  // fp16 0.5
constexpr uint16_t kHQuarter = 0x3400;
constexpr uint16_t kHMinus1 = 0xBC00;
constexpr uint16_t kH2 = 0x4000;

template <typename Block>
std::vector<float> dequant(DType t, const Block& b) {
  std::vector<float> out(size_t(dtype_info(t).block_elems));
  dequantize_row(t, &b, out.data(), int64_t(out.size()));
  return out;
}

TEST(Dequant, Q4_0) {
  BlockQ4_0 b{};
  b.d = kHHalf;
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
  const auto y = dequant(DType::Q4_0, b);
  for (int i = 0; i < 32; ++i) {
    const int nib = i < 16 ? (b.qs[i] & 0xF) : (b.qs[i - 16] >> 4);
    EXPECT_EQ(y[i], 0.5f * float(nib - 8)) << i;
  }
  EXPECT_EQ(y[0], -4.0f);   // low nibble 0 of byte 0
  EXPECT_EQ(y[15], 3.5f);   // low nibble 15 of byte 15
  EXPECT_EQ(y[16], 3.5f);   // high nibble 15 of byte 0
  EXPECT_EQ(y[31], -4.0f);  // high nibble 0 of byte 15
}

TEST(Dequant, Q4_1) {
  BlockQ4_1 b{};
  b.d = kHQuarter;
  b.m = kHMinus1;
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((j ^ 5) << 4));
  const auto y = dequant(DType::Q4_1, b);
  for (int i = 0; i < 32; ++i) {
    const int nib = i < 16 ? i : ((i - 16) ^ 5);
    EXPECT_EQ(y[i], 0.25f * float(nib) - 1.0f) << i;
  }
  EXPECT_EQ(y[3], -0.25f);
  EXPECT_EQ(y[16], 0.25f);  // high nibble of byte 0 is 5
}

// qh = 0xAAAA5555: values 0..15 have the high bit when even, values 16..31 when odd.
constexpr uint8_t kQh[4] = {0x55, 0x55, 0xAA, 0xAA};

TEST(Dequant, Q5_0) {
  BlockQ5_0 b{};
  b.d = kH1;
  std::memcpy(b.qh, kQh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
  const auto y = dequant(DType::Q5_0, b);
  for (int i = 0; i < 32; ++i) {
    const int nib = i < 16 ? i : 15 - (i - 16);
    const int high = (kQh[i / 8] >> (i % 8)) & 1;
    EXPECT_EQ(y[i], float((nib | (high << 4)) - 16)) << i;
  }
  EXPECT_EQ(y[0], 0.0f);    // 0 | 16 - 16
  EXPECT_EQ(y[1], -15.0f);  // 1 - 16
  EXPECT_EQ(y[16], -1.0f);  // 15 - 16 (bit 16 clear)
  EXPECT_EQ(y[17], 14.0f);  // 14 | 16 - 16
}

TEST(Dequant, Q5_1) {
  BlockQ5_1 b{};
  b.d = kHHalf;
  b.m = kH2;
  std::memcpy(b.qh, kQh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
  const auto y = dequant(DType::Q5_1, b);
  for (int i = 0; i < 32; ++i) {
    const int nib = i < 16 ? i : 15 - (i - 16);
    const int high = (kQh[i / 8] >> (i % 8)) & 1;
    EXPECT_EQ(y[i], 0.5f * float(nib | (high << 4)) + 2.0f) << i;
  }
  EXPECT_EQ(y[0], 10.0f);  // nibble 0, bit 0 set: 16 * 0.5 + 2
  EXPECT_EQ(y[1], 2.5f);   // nibble 1, bit 1 clear: 1 * 0.5 + 2
  EXPECT_EQ(y[31], 10.0f); // high nibble 0 of byte 15, bit 31 set
}

TEST(Dequant, Q8_0AndQ8_1AndQ8_K) {
  BlockQ8_0 a{};
  a.d = 0x3000;  // 0.125
  for (int j = 0; j < 32; ++j) a.qs[j] = int8_t(j * 7 - 100);
  const auto ya = dequant(DType::Q8_0, a);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(ya[i], 0.125f * float(i * 7 - 100));
  EXPECT_EQ(ya[0], -12.5f);

  BlockQ8_1 b{};
  b.d = kH2;
  b.s = 0x7BFF;  // s does not enter the values
  for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(50 - 3 * j);
  const auto yb = dequant(DType::Q8_1, b);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(yb[i], 2.0f * float(50 - 3 * i));

  BlockQ8_K c{};
  c.d = 0.375f;
  for (int j = 0; j < 256; ++j) c.qs[j] = int8_t((j * 37) % 255 - 127);
  const auto yc = dequant(DType::Q8_K, c);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(yc[i], 0.375f * float((i * 37) % 255 - 127));
}

TEST(Dequant, Q2_K) {
  BlockQ2_K b{};
  b.d = kH1;
  b.dmin = kHHalf;
  for (int g = 0; g < 16; ++g) b.scales[g] = uint8_t(g | ((15 - g) << 4));
  for (int i = 0; i < 64; ++i) b.qs[i] = uint8_t(i * 37 + 11);
  b.qs[0] = 0xE4;  // 2-bit fields 0, 1, 2, 3 (shifts 0, 2, 4, 6)
  const auto y = dequant(DType::Q2_K, b);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, s = (e % 128) / 32, l = e % 32, g = e / 16;
    const int q = (b.qs[32 * half + l] >> (2 * s)) & 3;
    EXPECT_EQ(y[e], 1.0f * float(g) * float(q) - 0.5f * float(15 - g)) << e;
  }
  EXPECT_EQ(y[0], -7.5f);              // group 0: scale 0, min 15: 0 - 7.5
  EXPECT_EQ(y[32], 2.0f * 1 - 6.5f);   // group 2: scale 2, min 13, q 1
  EXPECT_EQ(y[64], 4.0f * 2 - 5.5f);   // group 4: scale 4, min 11, q 2
  EXPECT_EQ(y[96], 6.0f * 3 - 4.5f);   // group 6: scale 6, min 9, q 3
}

TEST(Dequant, Q3_K) {
  BlockQ3_K b{};
  b.d = kH1;
  const uint8_t scales[12] = {0x21, 0x43, 0x65, 0x87, 0xA9, 0xCB, 0xED, 0x0F, 0xE4, 0x1B, 0x00, 0xFF};
  std::memcpy(b.scales, scales, 12);
  for (int i = 0; i < 64; ++i) b.qs[i] = uint8_t(i * 53 + 7);
  for (int i = 0; i < 32; ++i) b.hmask[i] = uint8_t(i * 29 + 3);
  b.qs[0] = 0xE4;
  b.hmask[0] = 0x05;
  const auto y = dequant(DType::Q3_K, b);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, s = (e % 128) / 32, l = e % 32, g = e / 16;
    const int low4 = g < 8 ? (scales[g] & 0xF) : (scales[g - 8] >> 4);
    const int high2 = (scales[8 + g % 4] >> (2 * (g / 4))) & 3;
    const int scale = (low4 | (high2 << 4)) - 32;
    const int q2 = (b.qs[32 * half + l] >> (2 * s)) & 3;
    const int hbit = (b.hmask[l] >> (4 * half + s)) & 1;
    EXPECT_EQ(y[e], float(scale) * float(q2 - (hbit ? 0 : 4))) << e;
  }
  // By hand: scale(0) = 1 - 32 = -31; scale(2) = 5 - 32 = -27; scale(4) = (9 | 1 << 4) - 32 = -7;
  // scale(6) = 13 - 32 = -19. Values: q2 0,1,2,3 with high bits 1,0,1,0 -> 0, -3, 2, -1.
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[32], 81.0f);
  EXPECT_EQ(y[64], -14.0f);
  EXPECT_EQ(y[96], 19.0f);
}

// get_scale_min_k4 from its definition: groups 0..3 take 6 bits of bytes j and j+4; groups 4..7 take a
// nibble of byte j+4 plus the top 2 bits of bytes j-4 (scale) and j (min).
void k4_expected(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

const uint8_t kK4Scales[12] = {0x41, 0x82, 0xC3, 0x04, 0x45, 0x86, 0xC7, 0x08, 0x9A, 0xBC, 0xDE, 0xF1};

TEST(Dequant, Q4_K) {
  BlockQ4_K b{};
  b.d = kH1;
  b.dmin = kHHalf;
  std::memcpy(b.scales, kK4Scales, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = uint8_t(i * 71 + 5);
  b.qs[0] = 0x7A;
  b.qs[64] = 0x3C;
  const auto y = dequant(DType::Q4_K, b);
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, upper = (e % 64) / 32, l = e % 32;
    const int q = upper ? (b.qs[32 * c + l] >> 4) : (b.qs[32 * c + l] & 0xF);
    int sc, mn;
    k4_expected(kK4Scales, e / 32, &sc, &mn);
    EXPECT_EQ(y[e], 1.0f * float(sc) * float(q) - 0.5f * float(mn)) << e;
  }
  EXPECT_EQ(y[0], 7.5f);     // group 0: sc 1, mn 5, q 10
  EXPECT_EQ(y[32], 11.0f);   // group 1: sc 2, mn 6, q 7
  EXPECT_EQ(y[128], 299.5f); // group 4: sc 26, mn 25, q 12
  EXPECT_EQ(y[160], 110.5f); // group 5: sc 44, mn 43, q 3
}

TEST(Dequant, Q5_K) {
  BlockQ5_K b{};
  b.d = kHHalf;
  b.dmin = kH1;
  std::memcpy(b.scales, kK4Scales, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = uint8_t(i * 71 + 5);
  for (int i = 0; i < 32; ++i) b.qh[i] = uint8_t(i * 89 + 17);
  b.qs[0] = 0x7A;
  b.qs[32] = 0x00;
  b.qh[0] = 0x06;
  const auto y = dequant(DType::Q5_K, b);
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, upper = (e % 64) / 32, l = e % 32;
    const int nib = upper ? (b.qs[32 * c + l] >> 4) : (b.qs[32 * c + l] & 0xF);
    const int hbit = (b.qh[l] >> (2 * c + upper)) & 1;
    int sc, mn;
    k4_expected(kK4Scales, e / 32, &sc, &mn);
    EXPECT_EQ(y[e], 0.5f * float(sc) * float(nib + 16 * hbit) - 1.0f * float(mn)) << e;
  }
  EXPECT_EQ(y[0], 0.5f * 1 * 10 - 5);         // bit 0 of qh[0] clear
  EXPECT_EQ(y[32], 0.5f * 2 * (7 + 16) - 6);  // bit 1 set
  EXPECT_EQ(y[64], 0.5f * 3 * 16 - 7);        // group 2 (sc 3, mn 7), nibble 0, bit 2 set
}

TEST(Dequant, Q6_K) {
  BlockQ6_K b{};
  b.d = kH1;
  for (int i = 0; i < 128; ++i) b.ql[i] = uint8_t(i * 101 + 13);
  for (int i = 0; i < 64; ++i) b.qh[i] = uint8_t(i * 43 + 9);
  for (int g = 0; g < 16; ++g) b.scales[g] = int8_t(g * 9 - 70);
  b.ql[0] = 0x5A;
  b.ql[32] = 0x3C;
  b.qh[0] = 0xE4;
  b.scales[0] = -3;
  b.scales[2] = 5;
  b.scales[4] = 7;
  b.scales[6] = -1;
  const auto y = dequant(DType::Q6_K, b);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t byte = b.ql[64 * half + 32 * (k & 1) + l];
    const int nib = k < 2 ? (byte & 0xF) : (byte >> 4);
    const int high = (b.qh[32 * half + l] >> (2 * k)) & 3;
    EXPECT_EQ(y[e], float(b.scales[e / 16]) * float((nib | (high << 4)) - 32)) << e;
  }
  EXPECT_EQ(y[0], 66.0f);   // (10 | 0) - 32 = -22, scale -3
  EXPECT_EQ(y[32], -20.0f); // (12 | 16) - 32 = -4, scale 5
  EXPECT_EQ(y[64], 35.0f);  // (5 | 32) - 32 = 5, scale 7
  EXPECT_EQ(y[96], -19.0f); // (3 | 48) - 32 = 19, scale -1
}

TEST(Dequant, FloatTypes) {
  const float f[3] = {1.5f, -2.0f, 1e-3f};
  std::vector<float> y(3);
  dequantize_row(DType::F32, f, y.data(), 3);
  EXPECT_EQ(y[1], -2.0f);
  const uint16_t h[3] = {0x3E00, 0xC000, 0x0001};  // 1.5, -2, 2^-24
  dequantize_row(DType::F16, h, y.data(), 3);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 5.9604644775390625e-08f);
  const uint16_t bf[3] = {0x3FC0, 0xC000, 0x4049};  // 1.5, -2, 3.140625
  dequantize_row(DType::BF16, bf, y.data(), 3);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[2], 3.140625f);
}

TEST(Dequant, RejectsPartialBlocks) {
  BlockQ4_0 b[2]{};
  float y[64];
  EXPECT_THROW(dequantize_row(DType::Q4_0, b, y, 33), Error);
  EXPECT_THROW(dequantize_row(DType::Q4_K, b, y, 32), Error);
  EXPECT_THROW(dequantize_row(DType::I32, b, y, 4), Error);
  EXPECT_THROW(quantize_row(DType::I32, y, b, 4), Error);
  EXPECT_THROW(quantize_row(DType::Q8_0, y, b, 40), Error);
}

}  // namespace
}  // namespace ferry
