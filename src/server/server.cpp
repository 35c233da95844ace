#include "server/server.h"

#include <atomic>
#include <chrono>
#include <random>

#include <httplib.h>
#include <sys/socket.h>

#include "server/routes.h"

namespace ferry::server {

namespace {

// The listening socket's accept-queue length. cpp-httplib 0.11 (a compiled library: its
// CPPHTTPLIB_LISTEN_BACKLOG cannot be changed from here) listens with a backlog of 5; a burst of a few
// hundred connects (serve_bench --clients 256) overflowed it, and the kernel dropped or reset the
// connections that did not fit (serve_bench: "connection: Read"). The kernel caps this at net.core.somaxconn.
constexpr int kListenBacklog = 4096;

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
  httplib::Server http;
  int listen_fd = -1;  // the socket httplib binds (seen by the socket-options hook); -1 before bind()

  Impl(ServingEngine& e, ServerOptions o)
      : engine(e), options(std::move(o)), ctx{engine, metrics, {}, {}, draining, random_salt()} {
    FERRY_CHECK(!options.model_names.empty(), "serve: no model name");
    FERRY_CHECK(options.http_threads >= 1 && options.http_threads <= 65536, "serve: --http-threads must be 1..65536, got {}", options.http_threads);
    ctx.facts = {options.model_names, engine.info().context, engine.info().vocab_size};
    // One worker per connection: a stream holds its worker for its whole life, so the pool bounds the
    // number of concurrent streams (httplib's default is hardware threads - 1).
    const size_t n_threads = size_t(options.http_threads);
    http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
    http.set_payload_max_length(options.max_body_bytes);
    http.set_keep_alive_timeout(options.keep_alive_seconds);
    // httplib closes a connection after 5 requests by default; a load generator (or a proxy) reuses its
    // connections for many more.
    http.set_keep_alive_max_count(1 << 20);
    http.set_read_timeout(30, 0);
    http.set_write_timeout(10, 0);  // a client that stops reading for this long is dropped (and cancelled)
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

}  // namespace ferry::server
