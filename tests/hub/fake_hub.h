// A Hub stand-in for the pull tests: a plain HTTP/1.1 server on 127.0.0.1 (a free port), one connection at a
// time, written on raw sockets so a test decides every byte: redirects, 206 ranges, a connection dropped in the
// middle of a body. Each response closes its connection.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ferry::test {

struct FakeRequest {
  std::string method, target;
  std::map<std::string, std::string> headers;  // lower-case names
};

class FakeHub {
 public:
  // handler returns the raw bytes to send; `drop_after` >= 0 cuts them off after that many bytes.
  struct Reply {
    std::string bytes;
    long drop_after = -1;
  };
  using Handler = std::function<Reply(const FakeRequest&)>;

  explicit FakeHub(Handler h) : handler_(std::move(h)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 16);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeHub() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<FakeRequest> requests() const {
    std::lock_guard lock(mutex_);
    return seen_;
  }

  static std::string response(int status, const std::string& body, const std::vector<std::string>& headers = {}) {
    std::string r = "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\nConnection: close\r\n";
    for (const std::string& h : headers) r += h + "\r\n";
    return r + "\r\n" + body;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::string in;
      char buf[4096];
      while (in.find("\r\n\r\n") == std::string::npos) {
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 2000) <= 0) break;
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        in.append(buf, size_t(n));
      }
      FakeRequest req;
      const size_t line_end = in.find("\r\n");
      const std::string line = in.substr(0, line_end);
      const size_t s1 = line.find(' '), s2 = line.find(' ', s1 + 1);
      if (s1 != std::string::npos && s2 != std::string::npos) {
        req.method = line.substr(0, s1);
        req.target = line.substr(s1 + 1, s2 - s1 - 1);
      }
      for (size_t pos = line_end + 2; pos < in.size();) {
        const size_t e = in.find("\r\n", pos);
        if (e == std::string::npos || e == pos) break;
        const std::string h = in.substr(pos, e - pos);
        const size_t colon = h.find(':');
        if (colon != std::string::npos) {
          std::string k = h.substr(0, colon);
          std::transform(k.begin(), k.end(), k.begin(), [](unsigned char ch) { return std::tolower(ch); });
          req.headers[k] = h.substr(h.find_first_not_of(' ', colon + 1));
        }
        pos = e + 2;
      }
      {
        std::lock_guard lock(mutex_);
        seen_.push_back(req);
      }
      const Reply r = handler_(req);
      const size_t n = r.drop_after >= 0 ? std::min(r.bytes.size(), size_t(r.drop_after)) : r.bytes.size();
      for (size_t sent = 0; sent < n;) {
        const ssize_t k = ::send(c, r.bytes.data() + sent, n - sent, MSG_NOSIGNAL);
        if (k <= 0) break;
        sent += size_t(k);
      }
      ::shutdown(c, SHUT_RDWR);
      ::close(c);
    }
  }

  Handler handler_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::vector<FakeRequest> seen_;
  std::thread thread_;
};

}  // namespace ferry::test
