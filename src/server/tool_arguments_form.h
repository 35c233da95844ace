// The form a chat template wants the arguments of past tool calls in. Most templates apply `tojson` to an
// object (transformers' convention, which the request parser follows); DeepSeek's and Functionary's
// concatenate them as text ('...' + tool['function']['arguments'] + '...'), which fails on an object as in
// Jinja2. Probed once at start, as llama.cpp's minja probes a template's capabilities.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace ferry::server {

// render: the template over a context (JSON text), throwing on a template error. True when a probe
// conversation with one past call renders with its arguments as JSON text but not as an object.
bool template_takes_text_arguments(const std::function<std::string(const std::string& context_json)>& render);

// The messages with each tool call's arguments written as JSON text (arguments already text are kept).
nlohmann::ordered_json with_text_arguments(const nlohmann::ordered_json& messages);

}  // namespace ferry::server
