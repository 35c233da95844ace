#include <limits>

#include "core/check.h"
#include "formats/gguf.h"

namespace ferry {

GgufValue GgufValue::strings(const std::vector<std::string>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(str(s));
  return array(GgufType::String, std::move(items));
}
GgufValue GgufValue::i32s(const std::vector<int32_t>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (int32_t x : v) items.push_back(i32(x));
  return array(GgufType::I32, std::move(items));
}
GgufValue GgufValue::f32s(const std::vector<float>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (float x : v) items.push_back(f32(x));
  return array(GgufType::F32, std::move(items));
}

bool GgufValue::is_integer() const {
  return std::holds_alternative<uint64_t>(value) || std::holds_alternative<int64_t>(value);
}
bool GgufValue::is_number() const { return is_integer() || std::holds_alternative<double>(value); }

int64_t GgufValue::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&value)) {
    FERRY_CHECK(*u <= uint64_t(std::numeric_limits<int64_t>::max()), "metadata integer {} is too large", *u);
    return int64_t(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&value)) return *i;
  if (const auto* b = std::get_if<bool>(&value)) return *b ? 1 : 0;
  fail("metadata value is not an integer");
}

double GgufValue::as_float() const {
  if (const auto* d = std::get_if<double>(&value)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&value)) return double(*u);
  if (const auto* i = std::get_if<int64_t>(&value)) return double(*i);
  fail("metadata value is not a number");
}

bool GgufValue::as_bool() const {
  if (const auto* b = std::get_if<bool>(&value)) return *b;
  if (is_integer()) return as_int() != 0;
  fail("metadata value is not a bool");
}

const std::string& GgufValue::as_string() const {
  const auto* s = std::get_if<std::string>(&value);
  FERRY_CHECK(s, "metadata value is not a string");
  return *s;
}

const GgufArray& GgufValue::as_array() const {
  const auto* a = std::get_if<GgufArray>(&value);
  FERRY_CHECK(a, "metadata value is not an array");
  return *a;
}

}  // namespace ferry
