#include "tokenizer/jinja/template.h"

#include "core/check.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser.h"

namespace ferry::jinja {

Template::Template(const std::string& source) : ast_(parse_template(source)) {}

std::string Template::render(const nlohmann::ordered_json& context, const RenderLimits& limits,
                             const Clock& clock) const {
  FERRY_CHECK(context.is_object(), "chat template context must be a JSON object");
  Value ctx = from_json(context);
  Interpreter interpreter(limits, clock);
  return interpreter.render(ast_, *ctx.dict);
}

}  // namespace ferry::jinja
