#include "server/sse.h"

#include "server/openai_response.h"

namespace ferry::server {

std::string sse_data(const nlohmann::json& payload) { return "data: " + dump_json(payload) + "\n\n"; }

std::string sse_done() { return "data: [DONE]\n\n"; }

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  std::vector<std::string> events;
  pending_.append(bytes);
  size_t start = 0;
  for (;;) {
    const size_t nl = pending_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(pending_.data() + start, nl - start);
    start = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {  // blank line: the event ends
      if (has_data_) events.push_back(std::move(data_));
      data_.clear();
      has_data_ = false;
      continue;
    }
    if (line.front() == ':') continue;
    const size_t colon = line.find(':');
    const std::string_view name = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (name == "data") {
      if (has_data_) data_ += '\n';
      data_.append(value);
      has_data_ = true;
    }
  }
  pending_.erase(0, start);
  return events;
}

}  // namespace ferry::server
