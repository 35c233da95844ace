// Parser: tokens -> TemplateAst, with jinja2's grammar and operator precedence. Syntax errors throw
// ferry::Error naming the line and column.
#pragma once

#include <string>

#include "tokenizer/jinja/ast.h"

namespace ferry::jinja {

TemplateAst parse_template(const std::string& source);

}  // namespace ferry::jinja
