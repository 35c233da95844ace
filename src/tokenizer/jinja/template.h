// A parsed Jinja template: parse once, render many times against JSON contexts.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/interpreter.h"

namespace ferry::jinja {

class Template {
 public:
  explicit Template(const std::string& source);  // throws ferry::Error on syntax errors (line/col)
  // context: a JSON object whose keys become template variables.
  std::string render(const nlohmann::ordered_json& context, const RenderLimits& limits = {},
                     const Clock& clock = {}) const;

 private:
  TemplateAst ast_;
};

}  // namespace ferry::jinja
