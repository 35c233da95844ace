// The HTTP server of `ferry serve`: cpp-httplib with a thread pool sized for many concurrent streams, the
// routes of routes.h, and a clean shutdown (drain: new requests get 503; stop: no more connections accepted).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"  // ferry::Error, which serving.h uses
#include "ferry/serving.h"
#include "server/access.h"
#include "server/guarded_server.h"

namespace ferry::server {

class ServerMetrics;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                       // 0: any free port (bind() returns it)
  std::vector<std::string> model_names;  // names clients may ask for; the first is reported
  int http_threads = 512;                // worker threads = concurrent connections served (streams hold one)
  size_t max_body_bytes = 32u << 20;     // larger request bodies get 413 (any transfer encoding)
  int keep_alive_seconds = 5;            // idle keep-alive connections close after this
  ConnectionLimits connection;           // head size, deadlines, connections per client (max_body_bytes,
                                         // keep_alive_seconds are copied in)
  AccessPolicy access;                   // API keys, Host, CORS (host is copied in)
  bool stream_error_on_cancel = true;    // a cancelled stream ends with an error event, not finish_reason "abort"
  bool parse_special_in_content = false; // special-token text in chat messages is parsed as tokens (else text)
  bool split_reasoning = true;           // <think> blocks go to reasoning_content (--reasoning-format none: content)
};

class HttpServer {
 public:
  HttpServer(ServingEngine& engine, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int bind();         // binds host:port; returns the port (useful with port 0); throws ferry::Error
  void run();         // serves until stop(); returns once every connection's handler has returned
  void drain();       // from now on new requests get 503 + Retry-After and Connection: close
  void stop();        // stops accepting connections; run() returns when in-flight handlers are done
  const ServerMetrics& metrics() const;
  int open_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::server
