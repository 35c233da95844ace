#include "tokenizer/utf8.h"

namespace ferry {

namespace {

// Bounds of the second byte for a lead byte (RFC 3629 table), excluding overlongs and surrogates.
struct LeadInfo {
  size_t len;       // 0: invalid lead byte
  uint8_t lo, hi;   // allowed range of the second byte
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes at text[pos] form a valid (possibly incomplete) prefix of a sequence, and whether
// it is complete. Returns {n_valid, full_len}; n_valid == full_len means complete.
std::pair<size_t, size_t> probe(std::string_view text, size_t pos) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  const LeadInfo info = lead_info(b0);
  if (info.len == 0) return {0, 1};
  if (info.len == 1) return {1, 1};
  size_t n = 1;
  for (; n < info.len && pos + n < text.size(); ++n) {
    const auto b = static_cast<uint8_t>(text[pos + n]);
    const uint8_t lo = n == 1 ? info.lo : 0x80;
    const uint8_t hi = n == 1 ? info.hi : 0xBF;
    if (b < lo || b > hi) return {0, info.len};  // broken sequence: the lead byte alone is invalid
  }
  return {n, info.len};
}

}  // namespace

size_t utf8_sequence_length(std::string_view text, size_t pos) {
  if (pos >= text.size()) return 0;
  const auto [n, full] = probe(text, pos);
  return n == full ? n : 0;
}

bool is_valid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t len = utf8_sequence_length(text, pos);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

uint32_t utf8_decode(std::string_view text, size_t pos, size_t len) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(text[pos + i])); };
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

std::string utf8_sanitize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t len = utf8_sequence_length(text, pos);
    if (len == 0) {
      utf8_append(out, kReplacementChar);
      ++pos;
    } else {
      out.append(text.substr(pos, len));
      pos += len;
    }
  }
  return out;
}

size_t utf8_complete_prefix(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const auto [n, full] = probe(text, pos);
    if (n == 0) {
      ++pos;  // invalid byte: it can be emitted (as U+FFFD) right away
    } else if (n == full) {
      pos += n;
    } else {
      break;  // valid so far but incomplete: wait for more bytes
    }
  }
  return pos;
}

}  // namespace ferry
