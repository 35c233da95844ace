#include "formats/quant.h"

#include "core/check.h"
#include "core/fp16.h"
#include "formats/quant_rows.h"

namespace ferry {
namespace {

int64_t whole_blocks(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  FERRY_CHECK(n >= 0, "negative element count {}", n);
  FERRY_CHECK(n % info.block_elems == 0, "{} values of type {} are not a whole number of {}-value blocks", n,
              info.name, info.block_elems);
  return n / info.block_elems;
}

}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  using namespace quant_rows;
  const int64_t nb = whole_blocks(t, n);
  switch (t) {
    case DType::F32:
      if (nb > 0) __builtin_memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(s[i]);
      return;
    }
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::Q4_0: return dequantize_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
    case DType::Q4_1: return dequantize_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
    case DType::Q5_0: return dequantize_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
    case DType::Q5_1: return dequantize_q5_1(static_cast<const BlockQ5_1*>(src), dst, nb);
    case DType::Q8_0: return dequantize_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
    case DType::Q8_1: return dequantize_q8_1(static_cast<const BlockQ8_1*>(src), dst, nb);
    case DType::Q2_K: return dequantize_q2_k(static_cast<const BlockQ2_K*>(src), dst, nb);
    case DType::Q3_K: return dequantize_q3_k(static_cast<const BlockQ3_K*>(src), dst, nb);
    case DType::Q4_K: return dequantize_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb);
    case DType::Q5_K: return dequantize_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb);
    case DType::Q6_K: return dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
    case DType::Q8_K: return dequantize_q8_k(static_cast<const BlockQ8_K*>(src), dst, nb);
    case DType::Q8_0G4: return dequantize_q8_0g4(static_cast<const BlockQ8_0G4*>(src), dst, nb);
    case DType::Q8_1G4: return dequantize_q8_1g4(static_cast<const BlockQ8_1G4*>(src), dst, nb);
    case DType::F8_E4M3_B128: return dequantize_f8_e4m3_b128(static_cast<const BlockF8E4M3B128*>(src), dst, nb);
    default: fail("cannot dequantize values of type {}", dtype_name(t));
  }
}

bool can_quantize(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16:
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
    case DType::Q8_0: case DType::Q8_1: case DType::Q8_K:
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
    case DType::Q8_0G4: case DType::Q8_1G4: case DType::F8_E4M3_B128:
      return true;
    default:
      return false;
  }
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  using namespace quant_rows;
  FERRY_CHECK(can_quantize(t), "cannot quantize to type {}", dtype_name(t));
  const int64_t nb = whole_blocks(t, n);
  switch (t) {
    case DType::F32:
      if (nb > 0) __builtin_memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp16(src[i]);
      return;
    }
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::Q4_0: return quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), nb);
    case DType::Q4_1: return quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), nb);
    case DType::Q5_0: return quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), nb);
    case DType::Q5_1: return quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), nb);
    case DType::Q8_0: return quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), nb);
    case DType::Q8_1: return quantize_q8_1(src, static_cast<BlockQ8_1*>(dst), nb);
    case DType::Q2_K: return quantize_q2_k(src, static_cast<BlockQ2_K*>(dst), nb);
    case DType::Q3_K: return quantize_q3_k(src, static_cast<BlockQ3_K*>(dst), nb);
    case DType::Q4_K: return quantize_q4_k(src, static_cast<BlockQ4_K*>(dst), nb);
    case DType::Q5_K: return quantize_q5_k(src, static_cast<BlockQ5_K*>(dst), nb);
    case DType::Q6_K: return quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), nb);
    case DType::Q8_K: return quantize_q8_k(src, static_cast<BlockQ8_K*>(dst), nb);
    case DType::Q8_0G4: return quantize_q8_0g4(src, static_cast<BlockQ8_0G4*>(dst), nb);
    case DType::Q8_1G4: return quantize_q8_1g4(src, static_cast<BlockQ8_1G4*>(dst), nb);
    case DType::F8_E4M3_B128: return quantize_f8_e4m3_b128(src, static_cast<BlockF8E4M3B128*>(dst), nb);
    default: fail("cannot quantize to type {}", dtype_name(t));
  }
}

}  // namespace ferry
