// Fuzz target: arbitrary bytes sent over a real TCP connection (127.0.0.1) to the server's HTTP front:
// GuardedServer (head/body limits, deadlines, per-client cap) with the access checks (API key, Host, Origin,
// Content-Type) before routing, and a POST route that reads its body as the generation routes do. After each
// input the server's state is checked: whatever came back is HTTP responses (or nothing), the connection is
// released (no worker or per-client slot leaks), and a well-formed request is still answered 200.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "server/access.h"
#include "server/guarded_server.h"

namespace {

using namespace ferry::server;

constexpr size_t kMaxBody = 4096;

struct Front {
  std::atomic<bool> draining{false};
  AccessPolicy policy;
  std::unique_ptr<GuardedServer> http;
  std::thread thread;
  int port = 0;

  Front() {
    ConnectionLimits limits;
    limits.max_head_bytes = 4096;
    limits.max_headers = 20;
    limits.max_body_bytes = kMaxBody;
    limits.request_seconds = 0.5;
    limits.idle_seconds = 0.2;
    limits.write_seconds = 1;
    limits.max_connections_per_client = 4;
    policy.api_keys = {"fuzz-key"};
    policy.open_health = true;
    policy.listen_host = "127.0.0.1";
    policy.cors_origins = {"http://ok.example"};
    http = std::make_unique<GuardedServer>(limits, draining);
    http->new_task_queue = [] { return new httplib::ThreadPool(4); };
    http->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      const AccessDecision d = check_access(policy, req, res);
      if (d.error) {
        res.status = d.error->status();
        res.set_content(d.error->what(), "text/plain");
      }
      return d.error || d.preflight_answered ? httplib::Server::HandlerResponse::Handled
                                             : httplib::Server::HandlerResponse::Unhandled;
    });
    http->Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
    http->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
      std::string body;
      bool too_large = false;
      reader([&](const char* d, size_t n) {
        if (body.size() + n > kMaxBody) {
          too_large = true;
          return false;
        }
        body.append(d, n);
        return true;
      });
      if (body.size() > kMaxBody) __builtin_trap();  // the limit held while reading
      if (too_large) http->close_after_response(req);
      res.status = too_large ? 413 : 200;
      res.set_content(std::to_string(body.size()), "text/plain");
    });
    port = http->bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { http->listen_after_bind(); });
    while (!http->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Front() {
    http->stop();
    thread.join();
  }
};

// Sends `bytes`, closes the sending side, and returns what came back before the server closed (2 s at most).
std::string http_exchange(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) __builtin_trap();
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server refused the rest (a limit), which is fine
    sent += size_t(n);
  }
  ::shutdown(fd, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, int(left)) <= 0) __builtin_trap();  // the server must close: no hang
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Front front;  // one server for the whole run (a fuzz target's process is its scope)
  const std::string response = http_exchange(front.port, std::string(reinterpret_cast<const char*>(data), size));
  if (!response.empty()) {
    if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) __builtin_trap();
    const int status = std::atoi(response.c_str() + 9);
    if (status < 200 || status > 599) __builtin_trap();
  }
  // The connection's worker and per-client slot come back.
  for (int i = 0; front.http->open_connections() != 0; ++i) {
    if (i > 2000) __builtin_trap();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::string ok = http_exchange(front.port, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  if (ok.rfind("HTTP/1.1 200", 0) != 0) __builtin_trap();
  return 0;
}
