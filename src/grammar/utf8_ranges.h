// Lowering codepoint ranges to UTF-8 byte sequences: [lo, hi] becomes a list of sequences of byte ranges
// (each sequence 1..4 ranges long) whose union is exactly the UTF-8 encodings of the codepoints in range.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace ferry::grammar {

struct ByteRange {
  uint8_t lo = 0, hi = 0;
};

using CodepointRange = std::pair<uint32_t, uint32_t>;  // inclusive, lo <= hi <= 0x10FFFF

// Sorted, merged, surrogates (U+D800..U+DFFF) removed.
std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges);
// The complement within [0, 0x10FFFF] (surrogates excluded) of normalized ranges.
std::vector<CodepointRange> complement_ranges(const std::vector<CodepointRange>& ranges);
// UTF-8 byte-range sequences for normalized ranges.
std::vector<std::vector<ByteRange>> utf8_sequences(const std::vector<CodepointRange>& ranges);

}  // namespace ferry::grammar
