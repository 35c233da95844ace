// GuardedServer: cpp-httplib's Server with each connection's life bounded before httplib parses a byte.
// httplib 0.11 reads a request head line by line with only a per-recv timeout and no limit on the number of
// headers, and reads chunked bodies whole whatever its payload limit; so this class takes over the
// connection loop (process_and_close_socket) and feeds httplib through its own Stream:
//  - the head must arrive complete within the request deadline, in at most max_head_bytes and max_headers
//    lines (else 408 / 431 and the connection closes);
//  - the body is read within the same deadline, and at most max_body_bytes (+ chunk framing) of it;
//  - an idle keep-alive connection closes after idle_seconds;
//  - at most max_connections_per_client connections per client address (more get 503 at once);
//  - while draining, every new request gets 503 with Retry-After and Connection: close.
// The accept thread only queues sockets; every worker is released within the request deadline by a slow
// client, so slow clients cannot hold the pool. client_gone() tells a handler its client closed the socket.
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <httplib.h>

namespace ferry::server {

struct ConnectionLimits {
  size_t max_head_bytes = 64u << 10;   // request line + headers
  size_t max_headers = 100;            // header lines per request
  size_t max_body_bytes = 32u << 20;   // body bytes as sent (chunked framing allowed on top)
  double request_seconds = 30.0;       // to receive one whole request (head and body) once it started
  double idle_seconds = 5.0;           // a keep-alive connection waits this long for its next request
  double write_seconds = 10.0;         // a client that stops reading for this long is dropped
  int max_connections_per_client = 256;  // open connections from one address (half the default --http-threads)
};

class GuardedServer : public httplib::Server {
 public:
  GuardedServer(ConnectionLimits limits, const std::atomic<bool>& draining);

  // Whether the client of `req` has closed its side of the connection (or the connection is gone).
  bool client_gone(const httplib::Request& req) const;
  // Closes the connection of `req` once its response is written (a refused body was left unread: what
  // follows it must not be taken for the next request).
  void close_after_response(const httplib::Request& req);
  bool closes_after_response(const httplib::Request& req) const;  // close_after_response was called for its socket
  int open_connections() const;

 private:
  bool process_and_close_socket(socket_t sock) override;

  ConnectionLimits limits_;
  const std::atomic<bool>& draining_;
  mutable std::mutex mutex_;
  std::map<std::string, int> per_address_;                   // open connections per client address
  struct Connection {
    socket_t sock;
    bool close_after_response = false;
  };
  std::map<std::pair<std::string, int>, Connection> sockets_;  // (address, port) -> its connection
};

}  // namespace ferry::server
