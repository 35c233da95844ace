#include "server/tool_call_parser.h"

#include <algorithm>

#include "server/json_tool_call_parser.h"
#include "server/named_tool_call_parser.h"

namespace ferry::server {

std::string ToolCallParser::new_id() {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const bool mistral = format_ == ToolCallFormat::Mistral;
  std::string id = mistral ? "" : "call_";
  for (size_t i = 0; i < (mistral ? 9u : 24u); ++i) id += kAlnum[rng_() % (sizeof kAlnum - 1)];
  return id;
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolCallFormat format, uint64_t id_seed) {
  if (name_in_json(format)) return std::make_unique<JsonToolCallParser>(format, id_seed);
  return std::make_unique<NamedToolCallParser>(format, id_seed);
}

size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace ferry::server
