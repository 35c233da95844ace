// Server-sent events as the OpenAI streaming endpoints use them: each event is one `data: <json>\n\n` and the
// stream ends with `data: [DONE]\n\n`. SseParser is the client side (tests and bench/serve).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ferry::server {

std::string sse_data(const nlohmann::json& payload);  // "data: {...}\n\n" (invalid UTF-8 replaced)
std::string sse_done();                               // "data: [DONE]\n\n"

// Feed bytes as they arrive (any split); each complete event's data (the lines after "data:", joined by \n,
// one leading space dropped) comes out of feed(). Comment lines (":") and other fields are ignored.
class SseParser {
 public:
  std::vector<std::string> feed(std::string_view bytes);

 private:
  std::string pending_;  // bytes of an unfinished line
  std::string data_;     // data of the event being read
  bool has_data_ = false;
};

}  // namespace ferry::server
