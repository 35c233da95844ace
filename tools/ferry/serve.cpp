// ferry serve: the OpenAI-compatible HTTP server (POST /v1/chat/completions, /v1/completions; GET /v1/models,
// /health, /metrics) over the continuous-batching serving engine.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "commands.h"
#include "common_options.h"
#include "core/check.h"
#include "core/env.h"
#include "ferry/serving.h"
#include "server/server.h"

namespace ferry::cli {
namespace {

struct ServeOptions {
  ModelOptions model;
  SpecCliOptions spec;  // the requests' default (a request's "spec" / "spec_k" fields override it)
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string model_name;
  ServingOptions serving;
  bool no_prefix_cache = false;
  bool no_graph_warmup = false;
  bool no_async_scheduling = false;
  int http_threads = 512;
  double shutdown_grace = 10.0;
  server::ServerOptions http;  // access, connection limits and stream behaviour (host/port/threads above)
  std::vector<std::string> api_key_files;
  bool stream_abort_as_finish = false;
  std::string chat_template_file;    // replaces the model's chat template
  std::string reasoning_format = "auto";
};

// Every API key: --api-key, one per non-empty line of each --api-key-file, and FERRY_API_KEY.
std::vector<std::string> api_keys(const ServeOptions& o, const Env& env) {
  std::vector<std::string> keys = o.http.access.api_keys;
  for (const std::string& path : o.api_key_files) {
    FERRY_CHECK(std::filesystem::is_regular_file(path), "serve: --api-key-file {} is not a readable file", path);
    std::ifstream in(path);
    FERRY_CHECK(in.good(), "serve: cannot read --api-key-file {}", path);
    std::string line;
    while (std::getline(in, line)) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty()) keys.push_back(line);
    }
  }
  if (env.api_key && !env.api_key->empty()) keys.push_back(*env.api_key);
  return keys;
}

// The name /v1/models reports: --model-name, else the model file's (or folder's) name without .gguf.
std::string default_model_name(const std::string& path) {
  std::filesystem::path p(path);
  if (p.filename().empty()) p = p.parent_path();
  std::string name = p.filename().string();
  if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
  return name;
}

// Signals without a handler: SIGINT and SIGTERM are blocked in every thread (the mask is inherited by the
// engine and HTTP threads created after this) and one thread owned by run_serve takes them with sigtimedwait.
// So no global state at all is shared with asynchronous signal context.
sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

int run_serve(ServeOptions& o, const Env& env) {
  FERRY_CHECK(o.http.access.allowed_hosts.empty() || server::is_wildcard_host(o.host),
              "serve: --allow-host needs a wildcard --host (0.0.0.0 or ::), got --host {}", o.host);
  const sigset_t signals = shutdown_signals();
  FERRY_CHECK(pthread_sigmask(SIG_BLOCK, &signals, nullptr) == 0, "serve: cannot block signals");
  signal(SIGPIPE, SIG_IGN);  // a client that went away shows up as a failed write, not a signal

  const std::string path = resolve_model(o.model.model, env);
  o.serving.prefix_caching = !o.no_prefix_cache;
  o.serving.graph_warmup = !o.no_graph_warmup;
  o.serving.async_scheduling = !o.no_async_scheduling;
  EngineOptions engine_options = o.model.engine_options(path, env);
  o.spec.apply(engine_options, [&](const std::string& m) { return resolve_model(m, env); });
  if (!o.chat_template_file.empty()) {
    std::ifstream in(o.chat_template_file, std::ios::binary);
    FERRY_CHECK(in.good() && std::filesystem::is_regular_file(o.chat_template_file),
                "serve: cannot read --chat-template {}", o.chat_template_file);
    engine_options.chat_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    FERRY_CHECK(!engine_options.chat_template.empty(), "serve: --chat-template {} is empty", o.chat_template_file);
  }
  ServingEngine engine(engine_options, o.serving);
  const ModelInfo& info = engine.info();
  server::ServerOptions so = o.http;
  so.access.api_keys = api_keys(o, env);
  so.stream_error_on_cancel = !o.stream_abort_as_finish;
  so.split_reasoning = o.reasoning_format != "none";
  so.host = o.host;
  so.port = o.port;
  so.http_threads = o.http_threads;
  so.model_names = {o.model_name.empty() ? default_model_name(path) : o.model_name};
  if (o.model_name.empty()) so.model_names.push_back(path);
  server::HttpServer http(engine, so);
  const int port = http.bind();
  std::fprintf(stderr, "ferry serve: %s (%s, %s), context %d, max running %d, max waiting %d, prefix cache %s\n",
               so.model_names.front().c_str(), info.arch.c_str(), info.backend.c_str(), info.context,
               o.serving.max_running, o.serving.max_waiting, o.serving.prefix_caching ? "on" : "off");
  if (const ServingStats st = engine.stats(); st.graph_warmup_steps > 0)
    std::fprintf(stderr, "ferry serve: %d step graphs recorded in %.1f s\n", st.graph_warmup_steps,
                 st.graph_warmup_seconds);
  std::printf("listening on http://%s:%d\n", o.host.c_str(), port);
  std::fflush(stdout);

  std::atomic<bool> served{false};  // run() returned (owned here; read by the signal thread)
  int cancelled_by_shutdown = 0;     // written by the signal thread, read after it is joined
  std::thread signal_thread([&] {
    timespec poll{0, 100'000'000};
    int sig = -1;
    while (!served.load() && (sig = sigtimedwait(&signals, nullptr, &poll)) < 0) {
    }
    if (served.load()) return;
    std::fprintf(stderr, "ferry serve: %s: no new requests; finishing in-flight ones (up to %.0f s; again to cancel them)\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", o.shutdown_grace);
    http.drain();  // new requests get 503 + Retry-After while in-flight ones finish
    // In-flight requests may finish within the grace period; a second signal or its end cancels the rest.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.shutdown_grace);
    // Done when no connection is left: a request submitted but not yet seen by the engine loop has one too.
    while (!served.load()) {
      const ServingStats s = engine.stats();
      if (s.running == 0 && s.waiting == 0 && http.open_connections() == 0) break;
      if (std::chrono::steady_clock::now() >= deadline || sigtimedwait(&signals, nullptr, &poll) >= 0) {
        std::fprintf(stderr, "ferry serve: cancelling %d running and %d waiting requests\n", s.running, s.waiting);
        break;
      }
    }
    const int64_t cancelled_before = engine.stats().requests_cancelled;
    engine.shutdown(false);  // cancels whatever is left; streams end with an error event (or finish_reason "abort")
    cancelled_by_shutdown = int(engine.stats().requests_cancelled - cancelled_before);
    while (!served.load()) {  // stop() before the listener was up is a no-op: repeat until run() returns
      http.stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  http.run();
  served.store(true);
  signal_thread.join();
  engine.shutdown(false);
  if (cancelled_by_shutdown > 0) {
    // Their clients got an error event (or finish_reason "abort"): the exit status says work was lost.
    std::fprintf(stderr, "ferry serve: stopped; %d requests were cancelled unfinished (exit status 3)\n", cancelled_by_shutdown);
    return 3;
  }
  std::fprintf(stderr, "ferry serve: stopped\n");
  return 0;
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  o->model.add(app);
  o->spec.add(app);
  app.add_option("--host", o->host, "address to listen on");
  app.add_option("--port", o->port, "TCP port (0: any free port, printed)")->check(CLI::Range(0, 65535));
  app.add_option("--model-name", o->model_name, "the model's name in the API (default: the file name)");
  app.add_option("--max-running", o->serving.max_running, "sequences in one step at most")->check(CLI::Range(1, 4096));
  app.add_option("--max-waiting", o->serving.max_waiting, "queued requests beyond which new ones get 429")->check(CLI::Range(0, 1 << 20));
  app.add_option("--sample-threads", o->serving.postprocess_threads,
                 "threads sampling a step's rows in parallel (0: automatic)")->check(CLI::Range(0, 256));
  app.add_option("--max-step-tokens", o->serving.max_step_tokens, "token budget of one engine step (chunked prefill)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--kv-tokens", o->serving.kv_tokens, "KV cache capacity in tokens (0: automatic)")->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  app.add_flag("--no-prefix-cache", o->no_prefix_cache, "do not reuse the KV blocks of equal prompt prefixes");
  app.add_flag("--no-graph-warmup", o->no_graph_warmup,
               "CUDA: record step graphs when a step first needs them instead of at start");
  app.add_flag("--no-async-scheduling", o->no_async_scheduling,
               "wait for each step's tokens before scheduling the next (by default the next step is launched first)");
  app.add_option("--http-threads", o->http_threads, "HTTP worker threads (concurrent connections)")->check(CLI::Range(1, 65536));
  app.add_option("--shutdown-grace", o->shutdown_grace, "seconds in-flight requests may take to finish on SIGINT/SIGTERM")->check(CLI::Range(0.0, 3600.0));
  server::ServerOptions& h = o->http;
  server::ConnectionLimits& c = h.connection;
  app.add_option("--api-key", h.access.api_keys, "require Authorization: Bearer KEY on every route (repeatable; also FERRY_API_KEY)");
  app.add_option("--api-key-file", o->api_key_files, "API keys, one per line (repeatable)");
  app.add_flag("--open-health", h.access.open_health, "GET /health needs no API key");
  app.add_option("--cors-origin", h.access.cors_origins, "an origin whose web pages may call the API (repeatable; * for any); default: none");
  app.add_option("--allow-host", h.access.allowed_hosts, "a Host name to accept with a wildcard --host (repeatable); IP literals and localhost always are");
  app.add_option("--max-body-bytes", h.max_body_bytes, "larger request bodies get 413, whatever their transfer encoding")->check(CLI::Range(size_t(1), size_t(1) << 34));
  app.add_option("--max-header-bytes", c.max_head_bytes, "a larger request line + headers get 431")->check(CLI::Range(size_t(256), size_t(1) << 24));
  app.add_option("--max-headers", c.max_headers, "more header lines get 431")->check(CLI::Range(size_t(1), size_t(1) << 16));
  app.add_option("--request-timeout", c.request_seconds, "seconds a client may take to send one whole request (else 408)")->check(CLI::Range(0.05, 3600.0));
  app.add_option("--keep-alive-timeout", h.keep_alive_seconds, "seconds an idle keep-alive connection stays open")->check(CLI::Range(1, 3600));
  app.add_option("--write-timeout", c.write_seconds, "seconds a client may stop reading before it is dropped (and its request cancelled)")->check(CLI::Range(0.05, 3600.0));
  app.add_option("--max-connections-per-client", c.max_connections_per_client, "open connections per client address (more get 503)")->check(CLI::Range(1, 1 << 20));
  app.add_flag("--parse-special-in-content", h.parse_special_in_content,
               "special-token text in chat message content becomes special tokens (default: plain text, so users cannot forge turns)");
  app.add_option("--chat-template", o->chat_template_file,
                 "a Jinja chat template file that replaces the model's (its tool-call markup is read from it)");
  app.add_option("--reasoning-format", o->reasoning_format,
                 "auto: <think> blocks of thinking models go to reasoning_content; none: they stay in the content")
      ->check(CLI::IsMember({"auto", "none"}));
  app.add_flag("--stream-abort-as-finish", o->stream_abort_as_finish,
               "a cancelled stream ends with finish_reason \"abort\" and [DONE] (default: an error event first)");
  return [o](const Env& env) { return run_serve(*o, env); };
}

}  // namespace ferry::cli
