// Lexer: template source -> tokens, applying jinja2's whitespace rules as transformers configures them
// (trim_blocks, lstrip_blocks, '-'/'+' markers, one trailing newline dropped, \r\n normalized to \n).
#pragma once

#include <string>
#include <vector>

namespace ferry::jinja {

enum class TokenType { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  TokenType type;
  std::string value;  // text, name, unescaped string literal, number spelling, or operator
  int line = 1;
  int col = 1;
};

// Throws ferry::Error ("chat template: line L col C: ...") on unterminated tags, strings or bad characters.
std::vector<Token> tokenize(const std::string& source);

}  // namespace ferry::jinja
