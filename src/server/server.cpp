#include "server/server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>

#include <httplib.h>
#include <sys/socket.h>

#include "server/reasoning_parser.h"
#include "server/routes.h"
#include "server/tool_format.h"

namespace ferry::server {

namespace {

// The listening socket's accept-queue length. cpp-httplib 0.11 (a compiled library: its
// CPPHTTPLIB_LISTEN_BACKLOG cannot be changed from here) listens with a backlog of 5; a burst of a few
// hundred connects (serve_bench --clients 256) overflowed it, and the kernel dropped or reset the
// connections that did not fit (serve_bench: "connection: Read"). The kernel caps this at net.core.somaxconn.
constexpr int kListenBacklog = 4096;

// The longest text one token stands for, in bytes, times the context: a prompt longer than this cannot fit,
// whatever it holds, so it is refused before it is tokenized (and tokenizing is bounded by it).
size_t max_prompt_bytes(const ServingEngine& engine) {
  const ModelInfo& info = engine.info();
  size_t longest = 1;
  for (int32_t id = 0; id < info.vocab_size; ++id) {
    const int32_t one[1] = {id};
    longest = std::max(longest, engine.detokenize(one).size());
  }
  return size_t(info.context) * (std::max<size_t>(longest, 64) + 1);  // 64: special tokens may not detokenize
}

ServerOptions with_copies(ServerOptions o) {
  o.connection.max_body_bytes = o.max_body_bytes;
  o.connection.idle_seconds = o.keep_alive_seconds;
  o.access.listen_host = o.host;
  return o;
}

uint64_t random_salt() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

}  // namespace

struct HttpServer::Impl {
  ServingEngine& engine;
  ServerOptions options;
  ServerMetrics metrics;
  std::atomic<bool> draining{false};
  RouteContext ctx;
  GuardedServer http;
  int listen_fd = -1;  // the socket httplib binds (seen by the socket-options hook); -1 before bind()

  Impl(ServingEngine& e, ServerOptions o)
      : engine(e), options(with_copies(std::move(o))), ctx{engine, metrics, {}, {}, draining, random_salt(), 0, 0, {}, true, {}, {}, {}},
        http(options.connection, draining) {
    FERRY_CHECK(!options.model_names.empty(), "serve: no model name");
    FERRY_CHECK(options.http_threads >= 1 && options.http_threads <= 65536, "serve: --http-threads must be 1..65536, got {}", options.http_threads);
    ctx.facts = {options.model_names, engine.info().context, engine.info().vocab_size, options.parse_special_in_content};
    learn_chat_template(engine, ctx.facts);
    ctx.facts.split_reasoning = options.split_reasoning;
    ctx.max_prompt_bytes = max_prompt_bytes(engine);
    ctx.max_body_bytes = options.max_body_bytes;
    ctx.access = options.access;
    ctx.stream_error_on_cancel = options.stream_error_on_cancel;
    ctx.client_gone = [this](const httplib::Request& req) { return http.client_gone(req); };
    ctx.close_connection = [this](const httplib::Request& req) { http.close_after_response(req); };
    ctx.closing = [this](const httplib::Request& req) { return http.closes_after_response(req); };
    // One worker per connection: a stream holds its worker for its whole life, so the pool bounds the
    // number of concurrent streams (httplib's default is hardware threads - 1).
    const size_t n_threads = size_t(options.http_threads);
    http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
    http.set_payload_max_length(options.max_body_bytes);
    http.set_keep_alive_timeout(options.keep_alive_seconds);
    // httplib closes a connection after 5 requests by default; a load generator (or a proxy) reuses its
    // connections for many more.
    http.set_keep_alive_max_count(1 << 20);
    // Read and write deadlines are GuardedServer's (options.connection).
    http.set_tcp_nodelay(true);     // stream chunks leave at once
    // Replaces httplib's default options (SO_REUSEPORT, which would let a second server share the port
    // silently): SO_REUSEADDR restarts on a port in TIME_WAIT, and bind() still fails on a port in use.
    // Also remembers the listening socket, whose backlog bind() raises.
    http.set_socket_options([this](socket_t fd) {
      int yes = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      listen_fd = fd;
    });
    install_routes(http, ctx);
  }
};

HttpServer::HttpServer(ServingEngine& engine, ServerOptions options) : impl_(std::make_unique<Impl>(engine, std::move(options))) {}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  const ServerOptions& o = impl_->options;
  FERRY_CHECK(o.port >= 0 && o.port <= 65535, "serve: --port must be 0..65535, got {}", o.port);
  int port = o.port;
  if (o.port == 0) {
    port = impl_->http.bind_to_any_port(o.host);
    FERRY_CHECK(port > 0, "serve: cannot listen on {} (any port)", o.host);
  } else {
    FERRY_CHECK(impl_->http.bind_to_port(o.host, o.port), "serve: cannot listen on {}:{} (in use, or not an address of this machine)", o.host, o.port);
  }
  // Listening again on a listening socket only updates its backlog (Linux, BSD).
  FERRY_CHECK(impl_->listen_fd >= 0 && ::listen(impl_->listen_fd, kListenBacklog) == 0,
              "serve: cannot raise the listen backlog of {}:{}", o.host, port);
  return port;
}

void HttpServer::run() { impl_->http.listen_after_bind(); }

void HttpServer::drain() { impl_->draining.store(true); }

void HttpServer::stop() {
  if (impl_->http.is_running()) impl_->http.stop();
}

const ServerMetrics& HttpServer::metrics() const { return impl_->metrics; }

int HttpServer::open_connections() const { return impl_->http.open_connections(); }

}  // namespace ferry::server
