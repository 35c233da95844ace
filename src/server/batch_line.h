// One line of an OpenAI Batch API file, in and out (the format `vllm run-batch` reads and writes):
//   in:  {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}
//   out: {"id": "batch_req_<hex>", "custom_id": "r1", "response": {"status_code": 200, "request_id": "...",
//         "body": {...the endpoint's response or its {"error": ...}}}, "error": null}
//   A line that cannot be run at all (not JSON, no custom_id, a method or url ferry does not serve, a duplicate
//   custom_id) gets "response": null and "error": {"code", "message"}; a request the endpoint rejects gets its
//   HTTP status and OpenAI error body in "response", as the server would have answered it.
// Fuzzed by tests/fuzz/batch_line_fuzz.cpp.
#pragma once

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace ferry::server {

inline constexpr size_t kMaxBatchLineBytes = size_t(32) << 20;  // the server's default body limit
inline constexpr size_t kMaxCustomIdBytes = 512;

struct BatchLine {
  std::string custom_id;
  Endpoint endpoint = Endpoint::Chat;
  std::string body;  // the request body's JSON text (parse_request reads it as the server does)
};

// Why a line cannot be run; custom_id when the line had a readable one.
struct BatchLineError {
  std::optional<std::string> custom_id;
  std::string code;     // "invalid_json", "missing_custom_id", "invalid_method", "invalid_url", "invalid_body", ...
  std::string message;
};

// The line's request, or why not. Never throws.
std::variant<BatchLine, BatchLineError> parse_batch_line(std::string_view line);

// Output lines (one JSON object each; serialize with dump_json, which replaces broken UTF-8).
nlohmann::json batch_response_line(const std::string& custom_id, const std::string& request_id, int status_code,
                                   const nlohmann::json& body);
nlohmann::json batch_error_line(const BatchLineError& e);

// The custom_ids of an output file's complete lines (each one JSON object ending in '\n'), and the byte length
// of those lines: what follows (a line cut off by a crash) is not a result and the rerun truncates it.
struct FinishedLines {
  std::set<std::string> custom_ids;
  size_t valid_bytes = 0;
};
FinishedLines finished_batch_lines(std::string_view output_file);

}  // namespace ferry::server
