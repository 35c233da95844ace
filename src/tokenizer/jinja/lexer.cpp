#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "tokenizer/jinja/text.h"

namespace ferry::jinja {
namespace {

constexpr const char* kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                      ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|", ";"};

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalize(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos <= src_.size()) {
      size_t start = find_tag(pos);
      std::string text = src_.substr(pos, (start == std::string::npos ? src_.size() : start) - pos);
      if (start == std::string::npos) {
        emit_text(text, pos);
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (sign == '-') {
        text = rstrip_all(text);
      } else if (sign != '+' && kind != '{') {
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (l_pos > 0 || line_starting) {
          bool all_ws = l_pos < text.size();
          for (size_t i = l_pos; i < text.size(); ++i)
            if (!is_ws(text[i])) all_ws = false;
          if (all_ws) text.resize(l_pos);
        }
      }
      emit_text(text, pos);
      size_t p = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        const size_t end = src_.find("#}", p);
        if (end == std::string::npos) error(start, "unterminated comment");
        pos = end + 2;
        if (end > p && src_[end - 1] == '-') {
          pos = skip_ws(pos);
        } else if (!(end > p && src_[end - 1] == '+') && pos < src_.size() && src_[pos] == '\n') {
          ++pos;
        }
        line_starting = pos > 0 && src_[pos - 1] == '\n';
        continue;
      }
      const bool block = kind == '%';
      const size_t first_token = tokens_.size();
      tokens_.push_back({block ? TokenType::kBlockBegin : TokenType::kVarBegin, "", 0, 0});
      set_pos(tokens_.back(), start);
      pos = lex_tag(p, block);
      line_starting = pos > 0 && src_[pos - 1] == '\n';
      if (block && tokens_.size() == first_token + 3 && tokens_[first_token + 1].type == TokenType::kName &&
          tokens_[first_token + 1].value == "raw") {
        tokens_.resize(first_token);
        pos = lex_raw(pos, start);
        line_starting = pos > 0 && src_[pos - 1] == '\n';
      }
    }
    tokens_.push_back({TokenType::kEof, "", 0, 0});
    set_pos(tokens_.back(), src_.size());
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error(size_t offset, const std::string& msg) const {
    const auto [line, col] = line_col(offset);
    fail("chat template: line {} col {}: {}", line, col, msg);
  }

  std::pair<int, int> line_col(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return {static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1] + 1)};
  }

  void set_pos(Token& t, size_t offset) const {
    const auto [line, col] = line_col(offset);
    t.line = line;
    t.col = col;
  }

  size_t find_tag(size_t pos) const {
    while (true) {
      const size_t p = src_.find('{', pos);
      if (p == std::string::npos || p + 1 >= src_.size()) return std::string::npos;
      const char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  size_t skip_ws(size_t pos) const {
    while (pos < src_.size() && is_ws(src_[pos])) ++pos;
    return pos;
  }

  static std::string rstrip_all(const std::string& s) {
    size_t e = s.size();
    while (e > 0 && is_ws(s[e - 1])) --e;
    return s.substr(0, e);
  }

  void emit_text(const std::string& text, size_t offset) {
    if (text.empty()) return;
    tokens_.push_back({TokenType::kText, text, 0, 0});
    set_pos(tokens_.back(), offset);
  }

  // Lexes the inside of {{ }} / {% %} from p; returns the position after the closing tag (and trimmed space).
  size_t lex_tag(size_t p, bool block) {
    int depth = 0;
    const char close = block ? '%' : '}';
    while (true) {
      while (p < src_.size() && is_ws(src_[p])) ++p;
      if (p >= src_.size()) error(p, block ? "unterminated '{%' tag" : "unterminated '{{' tag");
      // closing tag, possibly with '-' or '+'
      if (depth == 0) {
        size_t q = p;
        char sign = '\0';
        if ((src_[q] == '-' || src_[q] == '+') && q + 2 < src_.size() + 0 && src_[q + 1] == close &&
            src_[q + 2] == '}') {
          sign = src_[q];
          ++q;
        }
        if (q + 1 < src_.size() && src_[q] == close && src_[q + 1] == '}' && (sign != '+' || block)) {
          tokens_.push_back({block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", 0, 0});
          set_pos(tokens_.back(), p);
          size_t after = q + 2;
          if (sign == '-') return skip_ws(after);
          if (block && sign != '+' && after < src_.size() && src_[after] == '\n') ++after;
          return after;
        }
      }
      const char c = src_[p];
      Token tok{TokenType::kOp, "", 0, 0};
      set_pos(tok, p);
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = p;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        tok.type = TokenType::kName;
        tok.value = src_.substr(p, e - p);
        p = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(p, tok);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p, tok);
      } else {
        bool found = false;
        for (const char* op : kOperators) {
          const size_t n = std::strlen(op);
          if (src_.compare(p, n, op) == 0) {
            tok.value = op;
            p += n;
            found = true;
            break;
          }
        }
        if (!found) error(p, fmt::format("unexpected character '{}'", c));
        if (tok.value == "(" || tok.value == "[" || tok.value == "{") ++depth;
        if ((tok.value == ")" || tok.value == "]" || tok.value == "}") && depth > 0) --depth;
      }
      tokens_.push_back(std::move(tok));
    }
  }

  size_t lex_number(size_t p, Token& tok) {
    size_t e = p;
    auto digits = [&] {
      while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
    };
    digits();
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      digits();
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        is_float = true;
        e = q;
        digits();
      }
    }
    tok.type = is_float ? TokenType::kFloat : TokenType::kInt;
    for (size_t i = p; i < e; ++i)
      if (src_[i] != '_') tok.value += src_[i];
    return e;
  }

  size_t lex_string(size_t p, Token& tok) {
    const char quote = src_[p];
    size_t i = p + 1;
    std::string out;
    while (true) {
      if (i >= src_.size()) error(p, "unterminated string literal");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) error(p, "unterminated string literal");
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          char32_t cp = 0;
          for (int k = 0; k < n; ++k) {
            const int h = i < src_.size() ? hex_value(src_[i]) : -1;
            if (h < 0) error(p, "truncated \\x/\\u escape in string literal");
            cp = cp * 16 + static_cast<char32_t>(h);
            ++i;
          }
          if (cp > 0x10FFFF) error(p, "illegal Unicode character in string literal");
          utf8_append(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
              cp = cp * 8 + static_cast<char32_t>(src_[i] - '0');
            utf8_append(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    tok.type = TokenType::kString;
    tok.value = std::move(out);
    return i + 1;
  }

  // After {% raw %}: everything up to {% endraw %} is text.
  size_t lex_raw(size_t pos, size_t raw_start) {
    size_t search = pos;
    while (true) {
      const size_t p = src_.find("{%", search);
      if (p == std::string::npos) error(raw_start, "missing '{% endraw %}'");
      size_t q = p + 2;
      const char sign = q < src_.size() ? src_[q] : '\0';
      if (sign == '-' || sign == '+') ++q;
      q = skip_ws(q);
      if (src_.compare(q, 6, "endraw") != 0) {
        search = p + 2;
        continue;
      }
      q = skip_ws(q + 6);
      char end_sign = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) {
        search = p + 2;
        continue;
      }
      std::string text = src_.substr(pos, p - pos);
      if (sign == '-') text = rstrip_all(text);
      emit_text(text, pos);
      size_t after = q + 2;
      if (end_sign == '-') return skip_ws(after);
      if (end_sign != '+' && after < src_.size() && src_[after] == '\n') ++after;
      return after;
    }
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(normalize(source)).run(); }

}  // namespace ferry::jinja
