#include "core/dtype.h"

#include <array>
#include <cctype>
#include <limits>
#include <string>

#include "core/check.h"

namespace ferry {
namespace {

constexpr std::array<DTypeInfo, 24> kInfos = {{
    {"f32", 1, 4, 0, false},
    {"f16", 1, 2, 1, false},
    {"bf16", 1, 2, 30, false},
    {"q4_0", 32, 18, 2, true},
    {"q4_1", 32, 20, 3, true},
    {"q5_0", 32, 22, 6, true},
    {"q5_1", 32, 24, 7, true},
    {"q8_0", 32, 34, 8, true},
    {"q8_1", 32, 36, 9, true},
    {"q2_K", 256, 84, 10, true},
    {"q3_K", 256, 110, 11, true},
    {"q4_K", 256, 144, 12, true},
    {"q5_K", 256, 176, 13, true},
    {"q6_K", 256, 210, 14, true},
    {"q8_K", 256, 292, 15, true},
    {"i8", 1, 1, 24, false},
    {"i16", 1, 2, 25, false},
    {"i32", 1, 4, 26, false},
    {"i64", 1, 8, 27, false},
    {"f64", 1, 8, 28, false},
    {"q8_0g4", 32, 64, -1, true},
    {"q8_1g4", 32, 68, -1, true},
    {"f8_e4m3_b128", 128, 132, -1, true},
    {"stacked", 1, 0, -1, true},
}};

}  // namespace

const DTypeInfo& dtype_info(DType t) { return kInfos[static_cast<size_t>(t)]; }

std::optional<DType> dtype_from_ggml(uint32_t ggml_id) {
  for (size_t i = 0; i < kInfos.size(); ++i)
    if (kInfos[i].ggml_id >= 0 && uint32_t(kInfos[i].ggml_id) == ggml_id) return static_cast<DType>(i);
  return std::nullopt;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (size_t i = 0; i < kInfos.size(); ++i) {
    std::string n(kInfos[i].name);
    for (char& c : n) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (n == lower) return static_cast<DType>(i);
  }
  return std::nullopt;
}

size_t row_bytes(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  FERRY_CHECK(n >= 0, "negative element count {}", n);
  FERRY_CHECK(n % info.block_elems == 0, "{} values of type {} are not a whole number of {}-value blocks", n,
              info.name, info.block_elems);
  const uint64_t blocks = uint64_t(n) / uint64_t(info.block_elems);
  if (info.block_bytes == 0) return 0;  // DType::Stacked: no layout of its own
  FERRY_CHECK(blocks <= std::numeric_limits<uint64_t>::max() / uint64_t(info.block_bytes),
              "byte size of {} values of type {} overflows", n, info.name);
  return size_t(blocks * uint64_t(info.block_bytes));
}

}  // namespace ferry
