// UTF-8 helpers for the tokenizer: validation, code point decoding/encoding, and completeness checks for
// streaming. "Valid" means well-formed per RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/utf8.h"  // utf8_append

namespace ferry {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// True when the whole text is well-formed UTF-8.
bool is_valid_utf8(std::string_view text);

// Length of the well-formed sequence starting at text[pos], or 0 when the bytes there are not one
// (invalid lead byte, bad continuation, overlong, surrogate, truncated).
size_t utf8_sequence_length(std::string_view text, size_t pos);

// Decodes the well-formed sequence at text[pos] (whose length utf8_sequence_length gave).
uint32_t utf8_decode(std::string_view text, size_t pos, size_t len);


// Replaces every byte that is not part of a well-formed sequence with U+FFFD.
std::string utf8_sanitize(std::string_view text);

// Number of leading bytes of text that can be emitted now without ending inside a UTF-8 sequence:
// complete sequences, plus invalid bytes (which can never become valid). A trailing incomplete but
// so-far-valid sequence is left out.
size_t utf8_complete_prefix(std::string_view text);

}  // namespace ferry
