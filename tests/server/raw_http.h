// A raw TCP client for server tests that must send what no HTTP library would (slow heads, endless chunked
// bodies, 100,000 headers): connect to 127.0.0.1:port, send bytes, read until the server closes or a deadline.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace ferry::test {

class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) close_now();
  }
  ~RawConn() { close_now(); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  bool ok() const { return fd_ >= 0; }
  // Sends all of `bytes`; false when the server closed or reset the connection.
  bool send(const std::string& bytes) {
    size_t done = 0;
    while (fd_ >= 0 && done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += size_t(n);
    }
    return fd_ >= 0;
  }
  // What arrives within `seconds`, until the server closes (or `until` appears, when given).
  std::string read(double seconds, const std::string& until = "") {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (fd_ >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, int(left)) <= 0) break;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.append(buf, size_t(n));
      if (!until.empty() && out.find(until) != std::string::npos) break;
    }
    return out;
  }
  void close_now() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// The status code of a raw HTTP response ("HTTP/1.1 431 ..."), 0 when there is none.
inline int status_of(const std::string& response) {
  if (response.size() < 12 || response.rfind("HTTP/1.", 0) != 0) return 0;
  return std::atoi(response.c_str() + 9);
}

}  // namespace ferry::test
