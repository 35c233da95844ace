// UTF-8 helpers for Python string semantics: lengths, indexing and slicing count code points.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"  // utf8_append

namespace ferry::jinja {

std::vector<char32_t> decode_utf8(std::string_view s);  // invalid bytes decode as U+FFFD
std::string encode_utf8(const std::vector<char32_t>& cps);
size_t count_code_points(std::string_view s);
bool is_py_space(char32_t cp);  // Python's str.isspace()
std::string py_strip(std::string_view s, bool left, bool right);  // str.strip() with default chars
std::string py_strip_chars(std::string_view s, std::string_view chars, bool left, bool right);
std::string ascii_upper(std::string_view s);
std::string ascii_lower(std::string_view s);
char32_t to_upper_cp(char32_t cp);
char32_t to_lower_cp(char32_t cp);
bool is_alpha_cp(char32_t cp);
// Python's str.splitlines() separators.
bool is_line_break(char32_t cp);

}  // namespace ferry::jinja
