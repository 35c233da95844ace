#include "grammar/gbnf.h"

#include <string>

#include "core/check.h"
#include "core/utf8.h"
#include "grammar/grammar_builder.h"

namespace ferry::grammar {

namespace {

constexpr int kMaxNesting = 200;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

class Parser {
 public:
  explicit Parser(std::string_view src) : src_(src) {}

  Grammar parse() {
    skip_space();
    FERRY_CHECK(pos_ < src_.size(), "grammar: empty grammar text");
    while (pos_ < src_.size()) {
      const std::string name = parse_name();
      skip_space();
      FERRY_CHECK(src_.substr(pos_, 3) == "::=", "grammar: expected '::=' after '{}' at line {}", name, line());
      pos_ += 3;
      const uint32_t id = b_.rule_id(name);
      FERRY_CHECK(!b_.defined(id), "grammar: rule '{}' is defined twice (line {})", name, line());
      b_.define(id, parse_alternatives(name, 0));
      skip_space();
    }
    return b_.finish("root");
  }

 private:
  size_t line() const {
    size_t n = 1;
    for (size_t i = 0; i < pos_ && i < src_.size(); ++i) n += src_[i] == '\n';
    return n;
  }

  void skip_space() {
    while (pos_ < src_.size()) {
      const char c = src_[pos_];
      if (c == '#') {
        while (pos_ < src_.size() && src_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
    FERRY_CHECK(pos_ > start, "grammar: expected a rule name at line {}", line());
    return std::string(src_.substr(start, pos_ - start));
  }

  // The next name is the start of a new rule (`name ::=`).
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < src_.size() && is_name_char(src_[p])) ++p;
    if (p == pos_) return false;
    while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\n' || src_[p] == '\r')) ++p;
    return src_.substr(p, 3) == "::=";
  }

  uint32_t decode_char() {  // one UTF-8 codepoint of the source
    const auto c = static_cast<unsigned char>(src_[pos_]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    FERRY_CHECK(n > 0 && pos_ + n <= src_.size(), "grammar: invalid UTF-8 at line {}", line());
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; ++i) {
      const auto d = static_cast<unsigned char>(src_[pos_ + i]);
      FERRY_CHECK((d & 0xC0) == 0x80, "grammar: invalid UTF-8 at line {}", line());
      cp = (cp << 6) | (d & 0x3F);
    }
    pos_ += n;
    return cp;
  }

  uint32_t parse_hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      FERRY_CHECK(pos_ < src_.size(), "grammar: unterminated escape at line {}", line());
      const char c = src_[pos_++];
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      FERRY_CHECK(d >= 0, "grammar: bad hex digit '{}' at line {}", c, line());
      v = v * 16 + static_cast<uint32_t>(d);
    }
    FERRY_CHECK(v <= 0x10FFFF, "grammar: escape beyond U+10FFFF at line {}", line());
    return v;
  }

  // A possibly escaped character inside a literal or class.
  uint32_t parse_char() {
    FERRY_CHECK(pos_ < src_.size(), "grammar: unterminated literal or class at line {}", line());
    if (src_[pos_] != '\\') return decode_char();
    ++pos_;
    FERRY_CHECK(pos_ < src_.size(), "grammar: unterminated escape at line {}", line());
    const char c = src_[pos_++];
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'x': return parse_hex(2);
      case 'u': return parse_hex(4);
      case 'U': return parse_hex(8);
      default: return static_cast<unsigned char>(c);  // \\ \" \[ \] \- and any other char as itself
    }
  }

  Sequence parse_term(const std::string& rule, int depth) {
    Sequence seq;
    const char c = src_[pos_];
    if (c == '"') {
      ++pos_;
      std::string bytes;
      while (true) {
        FERRY_CHECK(pos_ < src_.size(), "grammar: unterminated literal at line {}", line());
        if (src_[pos_] == '"') break;
        utf8_append(bytes, parse_char());
      }
      ++pos_;
      b_.literal(bytes, seq);
    } else if (c == '[') {
      ++pos_;
      const bool negate = pos_ < src_.size() && src_[pos_] == '^';
      if (negate) ++pos_;
      std::vector<CodepointRange> ranges;
      while (true) {
        FERRY_CHECK(pos_ < src_.size(), "grammar: unterminated class at line {}", line());
        if (src_[pos_] == ']') break;
        const uint32_t lo = parse_char();
        uint32_t hi = lo;
        if (pos_ + 1 < src_.size() && src_[pos_] == '-' && src_[pos_ + 1] != ']') {
          ++pos_;
          hi = parse_char();
          FERRY_CHECK(lo <= hi, "grammar: class range out of order at line {}", line());
        }
        ranges.push_back({lo, hi});
      }
      ++pos_;
      ranges = normalize_ranges(std::move(ranges));
      if (negate) ranges = complement_ranges(ranges);
      seq.push_back(b_.codepoints(ranges, rule));
    } else if (c == '.') {
      ++pos_;
      seq.push_back(b_.codepoints({{0, 0x10FFFF}}, rule));
    } else if (c == '(') {
      ++pos_;
      FERRY_CHECK(depth < kMaxNesting, "grammar: groups nested deeper than {} at line {}", kMaxNesting, line());
      Alternatives alts = parse_alternatives(rule, depth + 1);
      FERRY_CHECK(pos_ < src_.size() && src_[pos_] == ')', "grammar: expected ')' at line {}", line());
      ++pos_;
      const uint32_t r = b_.fresh_rule(rule);
      b_.define(r, std::move(alts));
      seq.push_back({ElementKind::Rule, r});
    } else if (is_name_char(c)) {
      seq.push_back({ElementKind::Rule, b_.rule_id(parse_name())});
    } else {
      fail("grammar: unexpected '{}' at line {}", c, line());
    }
    return seq;
  }

  uint32_t parse_count() {
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '9' && v <= kMaxRepetition) {
      v = v * 10 + static_cast<uint64_t>(src_[pos_++] - '0');
    }
    FERRY_CHECK(pos_ > start, "grammar: expected a number in {{}} at line {}", line());
    FERRY_CHECK(v <= kMaxRepetition, "grammar: repetition count above {} at line {}", kMaxRepetition, line());
    return static_cast<uint32_t>(v);
  }

  Sequence parse_sequence(const std::string& rule, int depth) {
    Sequence seq;
    while (true) {
      skip_space();
      if (pos_ >= src_.size()) break;
      const char c = src_[pos_];
      if (c == '|' || c == ')') break;
      if (is_name_char(c) && at_rule_start()) break;
      Sequence term = parse_term(rule, depth);
      skip_space();
      if (pos_ < src_.size() && (src_[pos_] == '*' || src_[pos_] == '+' || src_[pos_] == '?')) {
        const char op = src_[pos_++];
        b_.repeat(std::move(term), op == '+' ? 1 : 0, op == '?' ? 1 : -1, rule, seq);
      } else if (pos_ < src_.size() && src_[pos_] == '{') {
        ++pos_;
        skip_space();
        const uint32_t min = parse_count();
        int64_t max = min;
        skip_space();
        if (pos_ < src_.size() && src_[pos_] == ',') {
          ++pos_;
          skip_space();
          max = (pos_ < src_.size() && src_[pos_] == '}') ? int64_t{-1} : int64_t{parse_count()};
          skip_space();
        }
        FERRY_CHECK(pos_ < src_.size() && src_[pos_] == '}', "grammar: expected '}}' at line {}", line());
        ++pos_;
        b_.repeat(std::move(term), min, max, rule, seq);
      } else {
        seq.insert(seq.end(), term.begin(), term.end());
      }
    }
    return seq;
  }

  Alternatives parse_alternatives(const std::string& rule, int depth) {
    Alternatives alts;
    alts.push_back(parse_sequence(rule, depth));
    while (pos_ < src_.size() && src_[pos_] == '|') {
      ++pos_;
      alts.push_back(parse_sequence(rule, depth));
    }
    return alts;
  }

  std::string_view src_;
  size_t pos_ = 0;
  GrammarBuilder b_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text) { return Parser(text).parse(); }

}  // namespace ferry::grammar
