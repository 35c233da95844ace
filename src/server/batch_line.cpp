#include "server/batch_line.h"

#include <random>

#include "server/openai_response.h"

namespace ferry::server {
namespace {

using nlohmann::json;

std::string random_hex() {
  std::random_device rd;
  const uint64_t v = (uint64_t(rd()) << 32) ^ rd();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (int i = 15; i >= 0; --i) s += kHex[(v >> (4 * i)) & 15];
  return s;
}

BatchLineError error(std::optional<std::string> id, std::string code, std::string message) {
  return {std::move(id), std::move(code), std::move(message)};
}

}  // namespace

std::variant<BatchLine, BatchLineError> parse_batch_line(std::string_view line) {
  if (line.size() > kMaxBatchLineBytes)
    return error(std::nullopt, "line_too_long", "the line has " + std::to_string(line.size()) + " bytes, more than " +
                                                    std::to_string(kMaxBatchLineBytes));
  // The request parser's own depth limit applies to the body; the envelope is shallow.
  const json j = json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return error(std::nullopt, "invalid_json", "the line is not a JSON object");
  const auto id = j.find("custom_id");
  if (id == j.end() || !id->is_string() || id->get_ref<const std::string&>().empty())
    return error(std::nullopt, "missing_custom_id", "the line has no 'custom_id' string");
  std::string custom_id = id->get<std::string>();
  if (custom_id.size() > kMaxCustomIdBytes)
    return error(std::nullopt, "invalid_custom_id", "'custom_id' is longer than " + std::to_string(kMaxCustomIdBytes) + " bytes");
  const auto method = j.find("method");
  if (method == j.end() || !method->is_string() || *method != "POST")
    return error(custom_id, "invalid_method", "'method' must be \"POST\"");
  const auto url = j.find("url");
  if (url == j.end() || !url->is_string())
    return error(custom_id, "invalid_url", "'url' must be /v1/chat/completions or /v1/completions");
  BatchLine out;
  if (*url == "/v1/chat/completions") {
    out.endpoint = Endpoint::Chat;
  } else if (*url == "/v1/completions") {
    out.endpoint = Endpoint::Completion;
  } else {
    return error(custom_id, "invalid_url", "'url' must be /v1/chat/completions or /v1/completions");
  }
  const auto body = j.find("body");
  if (body == j.end() || !body->is_object()) return error(custom_id, "invalid_body", "'body' must be a JSON object");
  out.body = body->dump(-1, ' ', false, json::error_handler_t::replace);
  out.custom_id = std::move(custom_id);
  return out;
}

json batch_response_line(const std::string& custom_id, const std::string& request_id, int status_code, const json& body) {
  return {{"id", "batch_req_" + random_hex()},
          {"custom_id", custom_id},
          {"response", {{"status_code", status_code}, {"request_id", request_id}, {"body", body}}},
          {"error", nullptr}};
}

json batch_error_line(const BatchLineError& e) {
  return {{"id", "batch_req_" + random_hex()},
          {"custom_id", e.custom_id ? json(*e.custom_id) : json(nullptr)},
          {"response", nullptr},
          {"error", {{"code", e.code}, {"message", e.message}}}};
}

FinishedLines finished_batch_lines(std::string_view text) {
  FinishedLines out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) break;  // cut off: not a result
    const std::string_view line = text.substr(pos, nl - pos);
    const json j = json::parse(line.begin(), line.end(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) break;  // a torn write: everything from here is redone
    if (const auto id = j.find("custom_id"); id != j.end() && id->is_string()) out.custom_ids.insert(id->get<std::string>());
    pos = nl + 1;
    out.valid_bytes = pos;
  }
  return out;
}

}  // namespace ferry::server
