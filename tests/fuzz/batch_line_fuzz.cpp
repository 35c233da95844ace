// Fuzz target: arbitrary bytes as one line of a Batch API input file (and as an output file to resume from).
// parse_batch_line never throws; an accepted line's body goes through the server's request parser, whose only
// rejection is ApiError(400); the output builders take whatever the line held.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/api_error.h"
#include "server/batch_line.h"
#include "server/openai_response.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::server;
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  const auto parsed = parse_batch_line(line);
  if (const auto* b = std::get_if<BatchLine>(&parsed)) {
    if (b->custom_id.empty() || b->custom_id.size() > kMaxCustomIdBytes) __builtin_trap();
    try {
      (void)parse_request(b->endpoint, b->body);
    } catch (const ApiError& e) {
      if (e.status() != 400) __builtin_trap();
    }
    (void)dump_json(batch_response_line(b->custom_id, "r", 200, nlohmann::json::object()));
  } else {
    (void)dump_json(batch_error_line(std::get<BatchLineError>(parsed)));
  }
  const FinishedLines f = finished_batch_lines(line);
  if (f.valid_bytes > line.size()) __builtin_trap();
  return 0;
}
