#include "tokenizer/jinja/text.h"

namespace ferry::jinja {

std::vector<char32_t> decode_utf8(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = 0;
    char32_t cp = 0;
    if (c < 0x80) {
      cp = c;
      n = 1;
    } else if ((c & 0xE0) == 0xC0) {
      cp = c & 0x1F;
      n = 2;
    } else if ((c & 0xF0) == 0xE0) {
      cp = c & 0x0F;
      n = 3;
    } else if ((c & 0xF8) == 0xF0) {
      cp = c & 0x07;
      n = 4;
    } else {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    if (i + n > s.size()) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    bool ok = true;
    for (int k = 1; k < n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string encode_utf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) utf8_append(out, cp);
  return out;
}

size_t count_code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_py_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_line_break(char32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
         cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

namespace {
template <typename Pred>
std::string strip_if(std::string_view s, bool left, bool right, Pred pred) {
  const auto cps = decode_utf8(s);
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && pred(cps[b])) ++b;
  if (right)
    while (e > b && pred(cps[e - 1])) --e;
  return encode_utf8(std::vector<char32_t>(cps.begin() + b, cps.begin() + e));
}
}  // namespace

std::string py_strip(std::string_view s, bool left, bool right) {
  return strip_if(s, left, right, is_py_space);
}

std::string py_strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
  const auto set = decode_utf8(chars);
  return strip_if(s, left, right, [&](char32_t c) {
    for (char32_t x : set)
      if (x == c) return true;
    return false;
  });
}

char32_t to_upper_cp(char32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 32;
  if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;  // Greek
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;                  // Cyrillic
  return cp;
}

char32_t to_lower_cp(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if ((cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)) return cp + 32;
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  return cp;
}

bool is_alpha_cp(char32_t cp) {
  return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= 0xC0 && cp != 0xD7 && cp != 0xF7);
}

std::string ascii_upper(std::string_view s) {
  std::vector<char32_t> cps = decode_utf8(s);
  for (auto& c : cps) c = to_upper_cp(c);
  return encode_utf8(cps);
}

std::string ascii_lower(std::string_view s) {
  std::vector<char32_t> cps = decode_utf8(s);
  for (auto& c : cps) c = to_lower_cp(c);
  return encode_utf8(cps);
}

}  // namespace ferry::jinja
