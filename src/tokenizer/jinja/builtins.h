// Built-in names of the template environment as transformers sets it up: global functions (range,
// namespace, dict, raise_exception, strftime_now), Python methods of str/dict/list values, and JSON
// conversion with json.dumps' exact formatting (transformers' tojson filter).
#pragma once

#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/value.h"

namespace ferry::jinja {

void add_builtins(std::unordered_map<std::string, Value>& vars);

// The bound method `obj.name` (e.g. "abc".upper, d.items), or Undefined when there is none.
Value method_of(const Value& obj, const std::string& name);

struct JsonFormat {
  std::optional<std::string> indent;  // json.dumps(indent=...): None, or the indent string per level
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// json.dumps(v, ...) as Python writes it; throws for values JSON cannot hold (Undefined, functions).
std::string to_json(const Value& v, const JsonFormat& format);

Value from_json(const nlohmann::ordered_json& j);

}  // namespace ferry::jinja
