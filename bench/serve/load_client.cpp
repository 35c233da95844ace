#include "load_client.h"

#include <chrono>

#include <nlohmann/json.hpp>

#include "server/sse.h"

namespace ferry::bench {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void read_usage(const json& j, RequestResult& r) {
  if (!j.contains("usage") || !j["usage"].is_object()) return;
  r.prompt_tokens = j["usage"].value("prompt_tokens", 0);
  r.completion_tokens = j["usage"].value("completion_tokens", 0);
}

}  // namespace

RequestResult send_request(httplib::Client& client, const WorkItem& item, const ClientOptions& o) {
  json body = {{"prompt", item.prompt},
               {"max_tokens", item.output_len},
               {"ignore_eos", true},  // vLLM's extension: exactly max_tokens tokens
               {"temperature", o.temperature},
               {"stream", o.stream}};
  if (!o.model.empty()) body["model"] = o.model;
  if (!o.extra_fields.empty()) body.update(json::parse(o.extra_fields));
  if (o.stream) body["stream_options"] = {{"include_usage", true}};
  RequestResult r;
  const Clock::time_point t0 = Clock::now();
  if (!o.stream) {
    const httplib::Result res = client.Post("/v1/completions", body.dump(), "application/json");
    r.latency = r.ttft = since(t0);
    if (!res) {
      r.error = "connection: " + httplib::to_string(res.error());
      return r;
    }
    if (res->status != 200) {
      r.error = "HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 200);
      return r;
    }
    try {
      read_usage(json::parse(res->body), r);
      r.ok = true;
    } catch (const json::exception& e) {
      r.error = std::string("bad JSON: ") + e.what();
    }
    return r;
  }

  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  server::SseParser parser;
  Clock::time_point last{};
  bool first = true, done = false;
  int status = 0;
  std::string error_body;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, std::min<size_t>(n, 400));
      return true;
    }
    for (const std::string& ev : parser.feed(std::string_view(data, n))) {
      if (ev == "[DONE]") {
        done = true;
        continue;
      }
      json j = json::parse(ev, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) {
        r.error = "stream error: " + j["error"].value("message", std::string());
        continue;
      }
      read_usage(j, r);
      if (!j.contains("choices") || j["choices"].empty()) continue;
      const std::string text = j["choices"][0].value("text", std::string());
      if (text.empty()) continue;
      const Clock::time_point now = Clock::now();
      if (first) r.ttft = std::chrono::duration<double>(now - t0).count();
      else r.itl.push_back(std::chrono::duration<double>(now - last).count());
      first = false;
      last = now;
    }
    return true;
  };
  const httplib::Result res = client.send(req);
  r.latency = since(t0);
  if (!res) {
    r.error = "connection: " + httplib::to_string(res.error());
    return r;
  }
  if (status != 200) {
    r.error = "HTTP " + std::to_string(status) + ": " + error_body;
    return r;
  }
  if (!done && r.error.empty()) r.error = "stream ended without [DONE]";
  r.ok = done && r.error.empty();
  return r;
}

}  // namespace ferry::bench
