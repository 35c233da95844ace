#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace ferry {

namespace {

constexpr bool is_printable_byte(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// byte -> code point (a constant table, computed at compile time).
constexpr std::array<uint16_t, 256> make_byte_map() {
  std::array<uint16_t, 256> map{};
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    map[b] = is_printable_byte(b) ? static_cast<uint16_t>(b) : static_cast<uint16_t>(256 + n++);
  }
  return map;
}

// code point - 256 -> byte, for the 68 non-printable bytes.
constexpr std::array<uint8_t, 68> make_shifted_map() {
  std::array<uint8_t, 68> map{};
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    if (!is_printable_byte(b)) map[n++] = static_cast<uint8_t>(b);
  }
  return map;
}

constexpr std::array<uint16_t, 256> kByteMap = make_byte_map();
constexpr std::array<uint8_t, 68> kShiftedMap = make_shifted_map();

}  // namespace

uint32_t byte_to_codepoint(uint8_t byte) { return kByteMap[byte]; }

int byte_from_codepoint(uint32_t cp) {
  if (cp < 256) return is_printable_byte(static_cast<int>(cp)) ? static_cast<int>(cp) : -1;
  if (cp < 256 + kShiftedMap.size()) return kShiftedMap[cp - 256];
  return -1;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8_append(out, kByteMap[static_cast<uint8_t>(c)]);
  return out;
}

std::string byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t len = utf8_sequence_length(text, pos);
    if (len == 0) {
      out.push_back(text[pos++]);
      continue;
    }
    const int byte = byte_from_codepoint(utf8_decode(text, pos, len));
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      out.append(text.substr(pos, len));
    }
    pos += len;
  }
  return out;
}

}  // namespace ferry
