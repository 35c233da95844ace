#include "grammar/regex.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "grammar/gbnf.h"
#include "grammar/utf8_ranges.h"

namespace ferry::grammar {

namespace {

constexpr int kMaxNesting = 100;
using Ranges = std::vector<CodepointRange>;

std::string escape_cp(uint32_t cp) {
  if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9')) {
    return std::string(1, static_cast<char>(cp));
  }
  return cp <= 0xFFFF ? fmt::format("\\u{:04X}", cp) : fmt::format("\\U{:08X}", cp);
}

std::string raw_class(const Ranges& ranges) {
  std::string out = "[";
  for (const auto& [lo, hi] : ranges) {
    out += escape_cp(lo);
    if (hi != lo) out += "-" + escape_cp(hi);
  }
  return out + "]";
}

bool contains(const Ranges& ranges, uint32_t cp) {
  for (const auto& [lo, hi] : ranges) {
    if (cp >= lo && cp <= hi) return true;
  }
  return false;
}

Ranges class_digit() { return {{'0', '9'}}; }
Ranges class_word() { return normalize_ranges({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
// Unicode whitespace (ECMA-262 and Python agree on these), so \S and [^\s] never admit a space.
Ranges class_space() {
  return normalize_ranges({{'\t', '\r'}, {0x1C, ' '}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680},
                           {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                           {0x3000, 0x3000}, {0xFEFF, 0xFEFF}});
}
// \d and \w are ASCII here; Python's re makes them Unicode, so their complements stay within ASCII (a
// subset of what either dialect means, never more).
Ranges ascii_complement(const Ranges& r) {
  Ranges out;
  for (const auto& [lo, hi] : complement_ranges(r)) {
    if (lo <= 0x7F) out.push_back({lo, std::min<uint32_t>(hi, 0x7F)});
  }
  return out;
}

uint32_t decode_utf8(std::string_view s, size_t& pos) {
  const auto c = static_cast<unsigned char>(s[pos]);
  const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  FERRY_CHECK(n > 0 && pos + n <= s.size(), "regex: invalid UTF-8 in pattern");
  uint32_t cp = n == 1 ? c : c & (0x7F >> n);
  for (int i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[pos + i]) & 0x3F);
  pos += n;
  return cp;
}

class RegexParser {
 public:
  RegexParser(std::string_view p, RegexTarget t) : p_(p), target_(t) {}

  std::string parse() {
    if (pos_ < p_.size() && p_[pos_] == '^') ++pos_;
    std::string out = parse_alternation(0);
    FERRY_CHECK(pos_ == p_.size(), "regex: unexpected ')' at offset {} in '{}'", pos_, p_);
    return "(" + out + ")";
  }

 private:
  std::string parse_alternation(int depth) {
    FERRY_CHECK(depth < kMaxNesting, "regex: groups nested deeper than {}", kMaxNesting);
    std::string out = parse_concat(depth);
    while (pos_ < p_.size() && p_[pos_] == '|') {
      ++pos_;
      out += " | " + parse_concat(depth);
    }
    return out;
  }

  std::string parse_concat(int depth) {
    std::string out;
    while (pos_ < p_.size() && p_[pos_] != '|' && p_[pos_] != ')') {
      if (p_[pos_] == '$' && (pos_ + 1 == p_.size() || p_[pos_ + 1] == ')' || p_[pos_ + 1] == '|')) {
        FERRY_CHECK(pos_ + 1 == p_.size(), "regex: '$' is supported only at the end of the pattern");
        ++pos_;
        continue;
      }
      std::string atom = parse_atom(depth);
      out += " " + atom + parse_quantifier();
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string parse_quantifier() {
    if (pos_ >= p_.size()) return "";
    std::string q;
    const char c = p_[pos_];
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      q = std::string(1, c);
    } else if (c == '{' && pos_ + 1 < p_.size() && p_[pos_ + 1] >= '0' && p_[pos_ + 1] <= '9') {
      const size_t end = p_.find('}', pos_);
      FERRY_CHECK(end != std::string_view::npos, "regex: unterminated '{{' in '{}'", p_);
      q = std::string(p_.substr(pos_, end - pos_ + 1));
      for (char d : q) {
        FERRY_CHECK((d >= '0' && d <= '9') || d == ',' || d == '{' || d == '}', "regex: bad repetition {} in '{}'",
                    q, p_);
      }
      pos_ = end + 1;
    } else {
      return "";
    }
    if (pos_ < p_.size() && (p_[pos_] == '?' || p_[pos_] == '+')) ++pos_;  // lazy / possessive: same language
    FERRY_CHECK(pos_ >= p_.size() || (p_[pos_] != '*' && p_[pos_] != '+' && p_[pos_] != '?'),
                "regex: repeated quantifier in '{}'", p_);
    return q;
  }

  // An escape after '\' (pos_ at the char after the backslash): a class or one codepoint.
  Ranges parse_escape() {
    FERRY_CHECK(pos_ < p_.size(), "regex: trailing backslash in '{}'", p_);
    const char c = p_[pos_++];
    switch (c) {
      case 'd': return class_digit();
      case 'D': return ascii_complement(class_digit());
      case 'w': return class_word();
      case 'W': return ascii_complement(class_word());
      case 's': return class_space();
      case 'S': return complement_ranges(class_space());
      case 'n': return {{'\n', '\n'}};
      case 'r': return {{'\r', '\r'}};
      case 't': return {{'\t', '\t'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case '0': return {{0, 0}};
      case 'x':
      case 'u': {
        const int n = c == 'x' ? 2 : 4;
        FERRY_CHECK(pos_ + n <= p_.size(), "regex: short \\{} escape in '{}'", c, p_);
        uint32_t v = 0;
        for (int i = 0; i < n; ++i) {
          const char h = p_[pos_++];
          const int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
          FERRY_CHECK(d >= 0, "regex: bad hex digit in '{}'", p_);
          v = v * 16 + static_cast<uint32_t>(d);
        }
        return normalize_ranges({{v, v}});
      }
      case 'b':
      case 'B': fail("regex: word boundaries (\\{}) are not supported", c);
      default:
        FERRY_CHECK(!(c >= '1' && c <= '9'), "regex: backreferences (\\{}) are not supported", c);
        FERRY_CHECK(!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')), "regex: escape \\{} is not supported", c);
        --pos_;
        const uint32_t cp = decode_utf8(p_, pos_);
        return {{cp, cp}};
    }
  }

  Ranges parse_class() {  // pos_ after '['
    const bool negate = pos_ < p_.size() && p_[pos_] == '^';
    if (negate) ++pos_;
    Ranges ranges;
    bool first = true, ascii_only = false;
    while (true) {
      FERRY_CHECK(pos_ < p_.size(), "regex: unterminated '[' in '{}'", p_);
      if (p_[pos_] == ']' && !first) break;
      first = false;
      if (p_[pos_] == '\\' && pos_ + 1 < p_.size() && std::string_view("dwDW").find(p_[pos_ + 1]) != std::string_view::npos) {
        ascii_only = true;
      }
      Ranges item = class_item();
      if (item.size() == 1 && item[0].first == item[0].second && pos_ + 1 < p_.size() && p_[pos_] == '-' &&
          p_[pos_ + 1] != ']') {
        ++pos_;
        Ranges hi = class_item();
        FERRY_CHECK(hi.size() == 1 && hi[0].first == hi[0].second && item[0].first <= hi[0].first,
                    "regex: bad class range in '{}'", p_);
        item[0].second = hi[0].first;
      }
      ranges.insert(ranges.end(), item.begin(), item.end());
    }
    ++pos_;
    ranges = normalize_ranges(std::move(ranges));
    if (!negate) return ranges;
    return ascii_only ? ascii_complement(ranges) : complement_ranges(ranges);
  }

  Ranges class_item() {
    if (p_[pos_] == '\\') {
      ++pos_;
      FERRY_CHECK(pos_ < p_.size(), "regex: trailing backslash in '{}'", p_);
      const char c = p_[pos_];
      if (c == 'b') {
        ++pos_;
        return {{'\b', '\b'}};
      }
      if (std::string_view("dDwWsSnrtfv0xu").find(c) != std::string_view::npos) return parse_escape();
      FERRY_CHECK(!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')), "regex: escape \\{} is not supported", c);
      const uint32_t cp = decode_utf8(p_, pos_);
      return {{cp, cp}};
    }
    FERRY_CHECK(p_.substr(pos_, 2) != "[:", "regex: POSIX classes ([:name:]) are not supported");
    const uint32_t cp = decode_utf8(p_, pos_);
    return {{cp, cp}};
  }

  std::string parse_atom(int depth) {
    const char c = p_[pos_];
    if (c == '(') {
      ++pos_;
      if (pos_ < p_.size() && p_[pos_] == '?') {
        FERRY_CHECK(pos_ + 1 < p_.size() && p_[pos_ + 1] == ':',
                    "regex: group syntax '(?{}' (lookaround, named groups, inline flags) is not supported",
                    pos_ + 1 < p_.size() ? p_[pos_ + 1] : ' ');
        pos_ += 2;
      }
      std::string inner = parse_alternation(depth + 1);
      FERRY_CHECK(pos_ < p_.size() && p_[pos_] == ')', "regex: unterminated '(' in '{}'", p_);
      ++pos_;
      return "(" + inner + ")";
    }
    FERRY_CHECK(c != '*' && c != '+' && c != '?', "regex: nothing to repeat at offset {} in '{}'", pos_, p_);
    FERRY_CHECK(c != '^', "regex: '^' is supported only at the start of the pattern");
    if (c == '[') {
      ++pos_;
      return gbnf_class(parse_class(), target_);
    }
    if (c == '.') {
      ++pos_;
      return gbnf_class(complement_ranges({{'\n', '\n'}}), target_);
    }
    if (c == '\\') {
      ++pos_;
      FERRY_CHECK(pos_ < p_.size(), "regex: trailing backslash in '{}'", p_);
      const char e = p_[pos_];
      if (std::string_view("dDwWsSnrtfv0xubB123456789").find(e) != std::string_view::npos ||
          (e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
        return gbnf_class(parse_escape(), target_);
      }
    }
    const uint32_t cp = decode_utf8(p_, pos_);
    return gbnf_class({{cp, cp}}, target_);
  }

  std::string_view p_;
  RegexTarget target_;
  size_t pos_ = 0;
};

}  // namespace

std::string gbnf_class(const std::vector<std::pair<uint32_t, uint32_t>>& ranges_in, RegexTarget target) {
  const Ranges ranges = normalize_ranges(ranges_in);
  if (target == RegexTarget::Raw) return raw_class(ranges);
  // JSON string body: plain characters as a class; '"', '\' and controls as their escapes.
  const Ranges specials = normalize_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
  Ranges plain;
  const Ranges allowed_plain = complement_ranges(specials);
  for (const auto& [lo, hi] : ranges) {
    for (const auto& [a, b] : allowed_plain) {
      const uint32_t x = std::max(lo, a), y = std::min(hi, b);
      if (x <= y) plain.push_back({x, y});
    }
  }
  std::vector<std::string> alts;
  if (!plain.empty()) alts.push_back(raw_class(plain));
  if (contains(ranges, '"')) alts.push_back("\"\\\\\\\"\"");
  if (contains(ranges, '\\')) alts.push_back("\"\\\\\\\\\"");
  for (uint32_t c = 0; c < 0x20; ++c) {
    if (contains(ranges, c)) alts.push_back(fmt::format("\"\\\\u00{:02x}\"", c));
  }
  if (alts.empty()) return "[]";
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

std::string gbnf_literal(std::string_view utf8, RegexTarget target) {
  std::string out = "\"";
  for (size_t pos = 0; pos < utf8.size();) {
    const uint32_t cp = decode_utf8(utf8, pos);
    const bool special = cp < 0x20 || cp == '"' || cp == '\\';
    if (target == RegexTarget::JsonString && special) {
      if (cp == '"') out += "\\\\\\\"";
      else if (cp == '\\') out += "\\\\\\\\";
      else out += fmt::format("\\\\u00{:02x}", cp);
    } else if (special || cp >= 0x7F) {
      out += cp <= 0xFFFF ? fmt::format("\\u{:04X}", cp) : fmt::format("\\U{:08X}", cp);
    } else {
      out += static_cast<char>(cp);
    }
  }
  return out + "\"";
}

std::string regex_to_gbnf(std::string_view pattern, RegexTarget target) {
  FERRY_CHECK(pattern.size() <= 100000, "regex: pattern longer than 100000 bytes");
  return RegexParser(pattern, target).parse();
}

Grammar compile_regex(std::string_view pattern) {
  return parse_gbnf("root ::= " + regex_to_gbnf(pattern, RegexTarget::Raw) + "\n");
}

}  // namespace ferry::grammar
