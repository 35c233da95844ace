#include "server/routes.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "server/api_error.h"
#include "server/openai_response.h"
#include "server/request_usage.h"
#include "server/sse.h"
#include "server/tokenize.h"

namespace ferry::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(50);  // how often an idle stream checks its client

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status() == 429 || e.status() == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status(), error_json(e));
}

std::string route_label(const std::string& path) {
  if (path == "/v1/chat/completions") return "chat";
  if (path == "/v1/completions") return "completions";
  if (path.rfind("/v1/models", 0) == 0) return "models";
  if (path == "/health") return "health";
  if (path == "/metrics") return "metrics";
  return "other";
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Per-request timing and token accounting, shared by the streaming and the whole-response paths.
struct Progress {
  ServerMetrics& metrics;
  Clock::time_point arrival;
  Clock::time_point last{};
  bool got_token = false;
  bool finish_counted = false;

  void on_update(const RequestUpdate& u) {
    const Clock::time_point now = Clock::now();
    const int64_t n = int64_t(u.tokens.size());
    if (n > 0) {
      if (!got_token) {
        metrics.observe_ttft(std::chrono::duration<double>(now - arrival).count());
        if (n > 1) metrics.observe_itl(0.0, n - 1);  // coalesced with the first: no gap measured
      } else {
        metrics.observe_itl(std::chrono::duration<double>(now - last).count(), n);
      }
      got_token = true;
      last = now;
      metrics.add_tokens(0, n, now);
    }
    if (u.finished) finish(u.finish, u.usage.prompt_tokens, now);
  }
  void finish(FinishReason reason, int64_t prompt_tokens, Clock::time_point now) {
    if (finish_counted) return;
    finish_counted = true;
    metrics.count_finish(reason);
    metrics.add_tokens(prompt_tokens, 0, now);
    metrics.observe_request_latency(std::chrono::duration<double>(now - arrival).count());
  }
};

// One choice of a request: its engine request (submitted lazily, see submit_rest) and what came back so far.
struct Choice {
  std::shared_ptr<RequestHandle> handle;   // null until submitted
  std::optional<ChatOutputParser> parser;  // chat: reasoning / tool calls
  std::optional<Progress> progress;
  std::string text;                        // completions: the text so far
  std::vector<GeneratedToken> tokens;      // with logprobs
  RequestUpdate last;                      // the last update (finish, usage, error)
  bool finished = false;
  bool role_sent = false;                  // streaming chat: its role delta went out
  size_t text_offset = 0;                  // streaming completions: logprobs text offsets
};

struct Submitted {
  ParsedRequest parsed;
  GenerationPlan plan;
  ResponseMeta meta;
  std::vector<Choice> choices;  // parsed.n of them
  bool rest_submitted = false;  // choices 1..n-1
  bool queue_full = false;      // one of them found the waiting queue full
};

// A prompt text longer than max_prompt_bytes holds more tokens than the context, whatever it says.
void check_prompt_bytes(const RouteContext& ctx, Endpoint endpoint, size_t bytes) {
  if (ctx.max_prompt_bytes == 0 || bytes <= ctx.max_prompt_bytes) return;
  const char* param = endpoint == Endpoint::Chat ? "messages" : "prompt";
  throw ApiError(400, "This model's maximum context length is " + std::to_string(ctx.facts.context) + " tokens. However, your " +
                          param + " has " + std::to_string(bytes) + " bytes, more than any " +
                          std::to_string(ctx.facts.context) + " tokens can hold (" + std::to_string(ctx.max_prompt_bytes) + ").",
                 param, "context_length_exceeded");
}

// The prefix-cache partition of a request: its API key (when keys are required) and its cache_salt, so that
// cached_tokens never tells one tenant about another's prompts. 0 (the shared partition) when neither is set.
uint64_t cache_partition(const RouteContext& ctx, const httplib::Request& req, const std::string& cache_salt) {
  const std::string key = ctx.access.api_keys.empty() ? std::string() : req.get_header_value("Authorization");
  if (key.empty() && cache_salt.empty()) return 0;
  return std::hash<std::string>{}(key + '\n' + cache_salt) | 1;  // never 0
}

std::shared_ptr<RequestHandle> submit_one(RouteContext& ctx, GenerationRequest g) {
  try {
    return ctx.engine.submit(std::move(g));
  } catch (const QueueFull& e) {
    throw ApiError(429, std::string("the server is busy: ") + e.what(), "", "queue_full");
  } catch (const Error& e) {  // a parameter the engine rejects, or shutdown
    if (ctx.draining.load()) throw ApiError(503, "the server is shutting down", "", "server_shutting_down");
    throw ApiError(400, e.what());
  }
}

// Choice i (i >= 1): choice 0's request with seed + i; its output parsed with its own call ids.
void submit_choice(RouteContext& ctx, Submitted& s, size_t i, Clock::time_point arrival) {
  GenerationRequest g = s.plan.request;
  g.sampling.seed += i;
  Choice& c = s.choices[i];
  c.handle = submit_one(ctx, std::move(g));
  c.progress.emplace(Progress{ctx.metrics, arrival});
  if (s.meta.endpoint == Endpoint::Chat) {
    ChatOutputOptions o = s.plan.output;
    o.id_seed += i;
    c.parser.emplace(o);
  }
}

// Choices 1..n-1 go in once choice 0 has its first token (or ended): its prompt's K/V blocks are then in the
// prefix cache and the other choices share them instead of computing the prompt again. A choice refused for a
// full queue ends the request (429, or an error event when streaming).
void submit_rest(RouteContext& ctx, Submitted& s, Clock::time_point arrival) {
  if (s.rest_submitted) return;
  s.rest_submitted = true;
  for (size_t i = 1; i < s.choices.size(); ++i) {
    try {
      submit_choice(ctx, s, i, arrival);
    } catch (const ApiError&) {
      s.queue_full = true;
      for (Choice& c : s.choices)
        if (c.handle) c.handle->cancel();
      return;
    }
  }
}

Submitted submit(RouteContext& ctx, Endpoint endpoint, const httplib::Request& req, const std::string& body,
                 Clock::time_point arrival) {
  if (ctx.draining.load()) throw ApiError(503, "the server is shutting down", "", "server_shutting_down");
  Submitted s;
  s.parsed = parse_request(endpoint, body, ctx.limits);
  if (s.parsed.prompt_text) check_prompt_bytes(ctx, endpoint, s.parsed.prompt_text->size());
  size_t message_bytes = 0;
  for (const ChatTurn& m : s.parsed.messages) message_bytes += m.content.size();
  check_prompt_bytes(ctx, endpoint, message_bytes);
  check_model(s.parsed.model, ctx.facts);
  std::random_device rd;  // per request: a fresh seed when the request gave none (OpenAI: nondeterministic)
  const uint64_t seed = (uint64_t(rd()) << 32) ^ rd();
  s.plan = build_generation_request(s.parsed, ctx.engine, ctx.facts, seed);
  s.plan.request.cache_salt = cache_partition(ctx, req, s.parsed.cache_salt);
  s.choices.resize(size_t(s.parsed.n));
  s.meta.endpoint = endpoint;
  submit_choice(ctx, s, 0, arrival);
  s.meta = {response_id(endpoint, s.choices[0].handle->id(), ctx.id_salt), unix_seconds(),
            s.parsed.model.empty() ? ctx.facts.names.front() : s.parsed.model, endpoint};
  if (s.choices.size() == 1) s.rest_submitted = true;
  else if (!ctx.engine.options().prefix_caching) submit_rest(ctx, s, arrival);  // nothing to share: all at once
  return s;
}

// Takes in one update of choice i. Returns true when it was choice 0's first news (time to submit the rest).
bool absorb(Submitted& s, size_t i, RequestUpdate& u) {
  Choice& c = s.choices[i];
  c.progress->on_update(u);
  if (s.parsed.logprobs >= 0) c.tokens.insert(c.tokens.end(), u.tokens.begin(), u.tokens.end());
  c.text += u.text;
  c.finished = u.finished;
  const bool news = !u.tokens.empty() || u.finished;
  c.last.finish = u.finish;
  c.last.error = u.error;
  c.last.usage = u.usage;
  return i == 0 && news;
}

// Waits a little for any live choice; fills `u` and returns its index, or -1 when none had news.
int poll_choices(Submitted& s, RequestUpdate& u) {
  size_t live = 0;
  for (const Choice& c : s.choices) live += c.handle && !c.finished;
  const auto timeout = live <= 1 ? kPollInterval : std::chrono::milliseconds(5);
  for (size_t i = 0; i < s.choices.size(); ++i) {
    Choice& c = s.choices[i];
    if (c.handle && !c.finished && c.handle->wait(u, timeout)) return int(i);
  }
  return -1;
}

bool all_finished(const Submitted& s) {
  for (const Choice& c : s.choices)
    if (!c.finished && (c.handle || !s.rest_submitted)) return false;
  return true;
}

// The request's usage (request_usage.h).
RequestUsage total_usage(const Submitted& s) {
  std::vector<RequestUsage> choices;
  for (const Choice& c : s.choices) choices.push_back(c.last.usage);
  return request_usage(choices);
}

std::string finish_reason_of(const Choice& c) {
  if (c.parser && c.last.finish == FinishReason::Stop && c.parser->called_tools()) return "tool_calls";
  return finish_reason_name(c.last.finish);
}

void respond_whole(RouteContext& ctx, Submitted& s, const httplib::Request& req, Clock::time_point arrival,
                   httplib::Response& res) {
  RequestUpdate u;
  Clock::time_point next_check = Clock::now() + kPollInterval;
  while (!all_finished(s)) {
    const int i = poll_choices(s, u);
    // A client that closed its connection gets nothing: cancel now so its blocks go back within a step
    // (checked every kPollInterval whether tokens are coming or not).
    if (Clock::now() >= next_check) {
      next_check = Clock::now() + kPollInterval;
      if (ctx.client_gone && ctx.client_gone(req))
        for (Choice& c : s.choices)
          if (c.handle) c.handle->cancel();
    }
    if (i >= 0 && absorb(s, size_t(i), u)) submit_rest(ctx, s, arrival);
  }
  if (s.queue_full) throw ApiError(429, "the server is busy: no room for all n choices", "", "queue_full");
  std::vector<ChoiceResult> results;
  for (size_t i = 0; i < s.choices.size(); ++i) {
    Choice& c = s.choices[i];
    if (c.last.finish == FinishReason::Error) throw ApiError(500, "generation failed: " + c.last.error);
    if (c.last.finish == FinishReason::Cancelled) throw ApiError(503, "the request was cancelled (the server is shutting down)");
    ChoiceResult r;
    r.index = int32_t(i);
    if (c.parser) {
      c.parser->feed(c.text);
      c.parser->finish();
      r.message = c.parser->message();
    } else {
      r.text = c.text;
    }
    r.finish_reason = finish_reason_of(c);
    if (s.parsed.logprobs >= 0) r.logprobs = logprobs_json(s.meta.endpoint, c.tokens);
    results.push_back(std::move(r));
  }
  send_json(res, 200, full_response(s.meta, results, total_usage(s)));
}

// Streams SSE chunks from a chunked content provider (runs on the HTTP worker thread after the handler
// returned). A failed write means the client left: the request is cancelled and its blocks freed. Each
// choice's chunks carry its index; a chat choice's first chunk is its role delta.
void respond_stream(RouteContext& ctx, Submitted s, Clock::time_point arrival, httplib::Response& res) {
  auto st = std::make_shared<Submitted>(std::move(s));
  ctx.metrics.stream_started();
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, &ctx, arrival, error_on_cancel = ctx.stream_error_on_cancel](size_t, httplib::DataSink& sink) {
        Submitted& s = *st;
        const ResponseMeta& meta = s.meta;
        const auto write = [&](const nlohmann::json& chunk) {
          const std::string bytes = sse_data(chunk);
          return sink.write(bytes.data(), bytes.size());
        };
        const auto end_stream = [&] {
          if (!sink.write(sse_done().data(), sse_done().size())) return false;
          sink.done();
          return true;
        };
        RequestUpdate u;
        while (!all_finished(s)) {
          for (size_t i = 0; i < s.choices.size(); ++i) {  // role deltas first
            Choice& c = s.choices[i];
            if (meta.endpoint != Endpoint::Chat || !c.handle || c.role_sent) continue;
            if (!write(stream_chunk(meta, {.index = int32_t(i), .role = true}))) return false;
            c.role_sent = true;
          }
          const int i = poll_choices(s, u);
          if (i < 0) {
            if (!sink.is_writable()) return false;
            continue;
          }
          if (absorb(s, size_t(i), u)) submit_rest(ctx, s, arrival);
          if (s.queue_full) {
            if (!write(error_json(429, "the server is busy: no room for all n choices", "", "queue_full"))) return false;
            return end_stream();
          }
          Choice& c = s.choices[size_t(i)];
          ChunkChoice chunk{.index = int32_t(i)};
          if (c.parser) {
            chunk.delta = c.parser->feed(u.text);
            if (u.finished) {
              ChatDelta rest = c.parser->finish();
              chunk.delta.reasoning += rest.reasoning;
              chunk.delta.content += rest.content;
              for (ToolCallDelta& d : rest.calls) {
                if (!chunk.delta.calls.empty() && chunk.delta.calls.back().index == d.index && d.id.empty())
                  chunk.delta.calls.back().arguments += d.arguments;
                else
                  chunk.delta.calls.push_back(std::move(d));
              }
            }
          } else {
            chunk.delta.content = u.text;
          }
          if (s.parsed.logprobs >= 0 && !u.tokens.empty()) chunk.logprobs = logprobs_json(meta.endpoint, u.tokens, c.text_offset);
          c.text_offset += u.text.size();
          if (!chunk.delta.empty() || chunk.logprobs) {
            if (!write(stream_chunk(meta, chunk))) return false;
          }
          if (!u.finished) continue;
          if (u.finish == FinishReason::Error) {
            if (!write(error_json(500, "generation failed: " + u.error))) return false;
            for (Choice& other : s.choices)
              if (other.handle) other.handle->cancel();
            return end_stream();
          }
          if (u.finish == FinishReason::Cancelled && error_on_cancel) {
            // A truncated stream must not read as a success to a client that only looks for [DONE].
            if (!write(error_json(503, "the request was cancelled (the server is shutting down)", "", "request_cancelled")))
              return false;
            for (Choice& other : s.choices)
              if (other.handle) other.handle->cancel();
            return end_stream();
          }
          if (!write(stream_chunk(meta, {.index = i, .finish_reason = finish_reason_of(c)}))) return false;
        }
        if (s.parsed.include_usage && !write(usage_chunk(meta, total_usage(s)))) return false;
        return end_stream();
      },
      [st, &metrics = ctx.metrics](bool) {
        // Runs when the response is released, whether it completed or the client went away.
        for (Choice& c : st->choices) {
          if (!c.handle) continue;
          if (!c.handle->finished()) c.handle->cancel();
          if (!c.progress->finish_counted) c.progress->finish(FinishReason::Cancelled, 0, Clock::now());
        }
        metrics.stream_ended();
      });
}

// The body, read here (not by httplib) so that its limit holds for chunked bodies too, while they arrive.
std::string read_body(const RouteContext& ctx, const httplib::Request& req, const httplib::ContentReader& reader) {
  const std::string too_large_message = "the request body is larger than " + std::to_string(ctx.max_body_bytes) + " bytes";
  // A body refused before its end leaves bytes that must not be read as the next request.
  const auto refuse = [&](int status, const std::string& message) {
    if (ctx.close_connection) ctx.close_connection(req);
    return ApiError(status, message);
  };
  if (req.has_header("Content-Length")) {
    const std::string n = req.get_header_value("Content-Length");
    if (n.size() > 19 || std::strtoull(n.c_str(), nullptr, 10) > ctx.max_body_bytes) throw refuse(413, too_large_message);
  }
  std::string body;
  bool too_large = false;
  const bool ok = reader([&](const char* data, size_t n) {
    if (body.size() + n > ctx.max_body_bytes) {
      too_large = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (too_large) throw refuse(413, too_large_message);
  if (!ok) throw refuse(400, "the request body could not be read (truncated, too slow, or bad chunked encoding)");
  return body;
}

void handle_generation(RouteContext& ctx, Endpoint endpoint, const httplib::Request& req, httplib::Response& res,
                       const httplib::ContentReader& reader) {
  const Clock::time_point arrival = Clock::now();
  try {
    Submitted s = submit(ctx, endpoint, req, read_body(ctx, req, reader), arrival);
    if (s.parsed.stream) respond_stream(ctx, std::move(s), arrival, res);
    else respond_whole(ctx, s, req, arrival, res);
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

// ferry's routes are GET and POST; httplib reads the body of a POST (to any path) before routing, and leaves
// the body of other methods unread when no route takes them (a GET with Content-Length, a PATCH), where it
// would be read as the next request on the connection.
bool body_left_unread(const httplib::Request& req) {
  if (req.method == "POST") return false;
  const std::string length = req.get_header_value("Content-Length");
  return req.has_header("Transfer-Encoding") || (!length.empty() && length != "0");
}

json model_card(const RouteContext& ctx) {
  return {{"id", ctx.facts.names.front()}, {"object", "model"}, {"created", 0}, {"owned_by", "ferry"},
          {"max_model_len", ctx.facts.context}};
}

}  // namespace

void install_routes(httplib::Server& http, RouteContext& ctx) {
  // Host, Origin, API key and Content-Type, before anything else is read; preflights are answered here.
  http.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    const AccessDecision d = check_access(ctx.access, req, res);
    if (body_left_unread(req) && ctx.close_connection) ctx.close_connection(req);
    if (d.error) {
      send_error(res, *d.error);
      // Its body is left unread: the connection closes after the answer, so the body is not read as a request.
      if ((req.has_header("Content-Length") || req.has_header("Transfer-Encoding")) && ctx.close_connection)
        ctx.close_connection(req);
    }
    return d.error || d.preflight_answered ? httplib::Server::HandlerResponse::Handled
                                           : httplib::Server::HandlerResponse::Unhandled;
  });
  http.Post("/v1/chat/completions", [&ctx](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    handle_generation(ctx, Endpoint::Chat, req, res, reader);
  });
  http.Post("/v1/completions", [&ctx](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    handle_generation(ctx, Endpoint::Completion, req, res, reader);
  });
  http.Get("/v1/models", [&ctx](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"object", "list"}, {"data", json::array({model_card(ctx)})}});
  });
  http.Get("/v1/models/(.+)", [&ctx](const httplib::Request& req, httplib::Response& res) {
    try {
      check_model(req.matches[1].str(), ctx.facts);
      send_json(res, 200, model_card(ctx));
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
  for (const char* prefix : {"", "/v1"}) {
    http.Post(std::string(prefix) + "/tokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
      try {
        send_json(res, 200, tokenize_response(req.body, ctx.engine, ctx.facts));
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    });
    http.Post(std::string(prefix) + "/detokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
      try {
        send_json(res, 200, detokenize_response(req.body, ctx.engine, ctx.facts));
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    });
  }
  http.Get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    if (ctx.draining.load()) send_json(res, 503, {{"status", "draining"}});
    else send_json(res, 200, {{"status", "ok"}});
  });
  http.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(ctx.metrics.render(ctx.engine.stats(), Clock::now()), "text/plain; version=0.0.4; charset=utf-8");
  });
  // Responses with an error status and no body yet (unknown route 404, body too large 413, ...) get
  // OpenAI's error JSON.
  http.set_error_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return;
    // httplib's own 400 (a DELETE whose body it did not take, a bad head) leaves the stream where it stopped
    // reading: nothing after it on the connection can be trusted to start a request.
    if ((res.status == 400 || body_left_unread(req)) && ctx.close_connection) ctx.close_connection(req);
    std::string message = "HTTP " + std::to_string(res.status);
    if (res.status == 404) message = "unknown route: " + req.method + " " + req.path;
    else if (res.status == 413) message = "the request body is too large";
    else if (res.status == 400) message = "bad HTTP request";
    send_json(res, res.status, error_json(res.status, message, "", res.status == 404 ? "unknown_route" : ""));
  });
  // A response after which the connection closes says so: a client must not send its next request on it.
  http.set_post_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (ctx.closing && ctx.closing(req)) res.set_header("Connection", "close");
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    send_json(res, 500, error_json(500, what));
  });
  http.set_logger([&ctx](const httplib::Request& req, const httplib::Response& res) {
    ctx.metrics.count_request(route_label(req.path), res.status);
  });
}

}  // namespace ferry::server
