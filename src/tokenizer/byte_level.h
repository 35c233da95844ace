// GPT-2's reversible byte <-> code point map: byte-level BPE vocabularies store each byte as a printable
// code point ('!'..'~', '¡'..'¬', '®'..'ÿ' map to themselves; the other 68 bytes map to U+0100.. in order),
// so a space is "Ġ" (U+0120) and a newline "Ċ" (U+010A).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ferry {

uint32_t byte_to_codepoint(uint8_t byte);
// The byte a code point stands for, or -1 when the code point is not in the map.
int byte_from_codepoint(uint32_t cp);

// Maps every byte of `bytes` to its code point, UTF-8 encoded (1 or 2 bytes each).
std::string byte_level_encode(std::string_view bytes);
// Inverse of byte_level_encode. Code points outside the map (or invalid UTF-8) are copied unchanged.
std::string byte_level_decode(std::string_view text);

}  // namespace ferry
