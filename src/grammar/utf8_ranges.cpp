#include "grammar/utf8_ranges.h"

#include <algorithm>

namespace ferry::grammar {

namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
// The last codepoint of each UTF-8 length.
constexpr uint32_t kLengthEnds[4] = {0x7F, 0x7FF, 0xFFFF, kMaxCodepoint};

int encode(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// [lo, hi] of one UTF-8 length: split until every continuation byte past the first differing one spans
// its whole 0x80..0xBF range (the classic range-to-UTF-8 construction used by RE2 and Rust's regex).
void split_same_length(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>& out) {
  uint8_t a[4], b[4];
  const int n = encode(lo, a);
  encode(hi, b);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;  // the low 6*i bits
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_same_length(lo, lo | m, out);
        split_same_length((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_same_length(lo, (hi & ~m) - 1, out);
        split_same_length(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::vector<ByteRange> seq(n);
  for (int i = 0; i < n; ++i) seq[i] = {a[i], b[i]};
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges) {
  std::vector<CodepointRange> cut;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodepoint);
    if (lo > hi) continue;
    if (lo < 0xD800 && hi >= 0xD800) {
      cut.push_back({lo, 0xD7FF});
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    } else {
      cut.push_back({lo, hi});
    }
  }
  std::sort(cut.begin(), cut.end());
  std::vector<CodepointRange> merged;
  for (const auto& r : cut) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

std::vector<CodepointRange> complement_ranges(const std::vector<CodepointRange>& ranges) {
  std::vector<CodepointRange> out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
  return normalize_ranges(std::move(out));
}

std::vector<std::vector<ByteRange>> utf8_sequences(const std::vector<CodepointRange>& ranges) {
  std::vector<std::vector<ByteRange>> out;
  for (auto [lo, hi] : ranges) {
    uint32_t start = 0;
    for (uint32_t end : kLengthEnds) {
      const uint32_t a = std::max(lo, start), b = std::min(hi, end);
      if (a <= b) split_same_length(a, b, out);
      start = end + 1;
    }
  }
  return out;
}

}  // namespace ferry::grammar
