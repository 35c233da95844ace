#include "server/guarded_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "server/api_error.h"

namespace ferry::server {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Milliseconds left until `deadline` for poll(), at least 0.
int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<int64_t>(left, 0, 1 << 30));
}

bool wait_for(socket_t sock, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{sock, events, 0};
    const int r = ::poll(&p, 1, ms_until(deadline));
    if (r > 0) return true;
    if (r == 0 || errno != EINTR) return false;
  }
}

void address_of(const sockaddr_storage& a, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, buf, sizeof(buf));
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, buf, sizeof(buf));
    port = ntohs(v6.sin6_port);
  }
  ip = buf;
}

// Whether the peer has closed its side (FIN read) or the socket failed; pending bytes mean it is alive.
bool peer_closed(socket_t sock) {
  char c;
  const ssize_t n = ::recv(sock, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;
  if (n == 0) return true;
  return !(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

// Closes after the client has read our last response: the sending side first, then what the client still
// sends is read and dropped (at most 256 KiB, 250 ms). Closing with unread input would reset the connection,
// and a reset can destroy the response (a 431 or 413 sent while the client was still sending) before it is read.
void linger_close(socket_t sock) {
  ::shutdown(sock, SHUT_WR);
  const auto deadline = after(0.25);
  char buf[16384];
  for (size_t dropped = 0; dropped < (256u << 10) && wait_for(sock, POLLIN, deadline);) {
    const ssize_t n = ::recv(sock, buf, sizeof(buf), 0);
    if (n <= 0) break;
    dropped += size_t(n);
  }
  ::close(sock);
}

enum class Head { kReady, kClosed, kIdle, kSlow, kTooLarge };

// httplib's Stream over one connection: bytes already read (the head, and whatever followed it) are served
// first; reads stop at the request's deadline and byte budget.
class GuardStream : public httplib::Stream {
 public:
  GuardStream(socket_t sock, const ConnectionLimits& limits, const std::atomic<bool>& draining)
      : sock_(sock), limits_(limits), draining_(draining) {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    if (getpeername(sock, reinterpret_cast<sockaddr*>(&a), &len) == 0) address_of(a, remote_ip_, remote_port_);
    len = sizeof(a);
    if (getsockname(sock, reinterpret_cast<sockaddr*>(&a), &len) == 0) address_of(a, local_ip_, local_port_);
  }

  // Waits up to `wait_seconds` for the next request to start (less once draining: an idle kept-alive
  // connection then closes within 100 ms, a fresh one within 1 s, so that its request still gets its 503),
  // then up to the request deadline for its whole head; on kReady the request's byte budget and deadline are set.
  Head read_head(double wait_seconds, bool fresh) {
    buf_.erase(0, pos_);  // what the previous request left (a pipelined request's bytes) moves to the front
    pos_ = 0;
    if (buf_.empty()) {
      const auto deadline = after(wait_seconds), drain_deadline = after(fresh ? 1.0 : 0.0);
      for (;;) {
        if (wait_for(sock_, POLLIN, std::min(deadline, after(0.1)))) break;
        const auto now = Clock::now();
        if (now >= deadline || (draining_.load() && now >= drain_deadline)) return Head::kIdle;
      }
      if (!fill()) return Head::kClosed;
    }
    deadline_ = after(limits_.request_seconds);
    size_t searched = pos_;
    for (;;) {
      const size_t end = head_end(searched);
      if (end != std::string::npos) {
        size_t lines = 0;
        for (size_t i = pos_; i < end; ++i) lines += buf_[i] == '\n';
        if (end - pos_ > limits_.max_head_bytes || lines > limits_.max_headers + 2) return Head::kTooLarge;
        budget_ = (end - pos_) + limits_.max_body_bytes + limits_.max_body_bytes / 8 + 4096;
        return Head::kReady;
      }
      if (buf_.size() - pos_ > limits_.max_head_bytes) return Head::kTooLarge;
      searched = buf_.size() >= 3 ? std::max(pos_, buf_.size() - 3) : pos_;
      if (!wait_in_slices()) return Head::kSlow;
      if (!fill()) return Head::kClosed;
    }
  }

  bool is_readable() const override { return pos_ < buf_.size() || wait_for(sock_, POLLIN, deadline_); }
  bool is_writable() const override {
    return wait_for(sock_, POLLOUT, after(limits_.write_seconds)) && !peer_closed(sock_);
  }

  ssize_t read(char* ptr, size_t size) override {
    if (budget_ == 0) return -1;  // the body is larger than the limit: httplib answers 400/413
    size = std::min(size, budget_);
    if (pos_ < buf_.size()) {
      const size_t n = std::min(size, buf_.size() - pos_);
      std::memcpy(ptr, buf_.data() + pos_, n);
      pos_ += n;
      budget_ -= n;
      return ssize_t(n);
    }
    if (!wait_for(sock_, POLLIN, deadline_)) return -1;  // past the request deadline
    ssize_t n;
    do {
      n = ::recv(sock_, ptr, size, 0);  // a signal must not end a body read as a failure (httplib answers 400)
    } while (n < 0 && errno == EINTR);
    if (n > 0) budget_ -= size_t(n);
    return n;
  }

  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      if (!wait_for(sock_, POLLOUT, after(limits_.write_seconds))) return -1;
      const ssize_t n = ::send(sock_, ptr + done, size - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return -1;
      done += size_t(n);
    }
    return ssize_t(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = remote_ip_;
    port = remote_port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = local_ip_;
    port = local_port_;
  }
  socket_t socket() const override { return sock_; }

 private:
  // Waits for input until the request deadline, polling in 100 ms slices so that a drain that starts
  // meanwhile cuts the wait to 1 s (a slow client cannot hold shutdown for the whole request timeout).
  bool wait_in_slices() {
    for (;;) {
      if (wait_for(sock_, POLLIN, std::min(deadline_, after(0.1)))) return true;
      const auto now = Clock::now();
      if (now >= deadline_) return false;
      if (draining_.load()) deadline_ = std::min(deadline_, now + std::chrono::seconds(1));
    }
  }

  bool fill() {
    char chunk[16384];
    ssize_t n;
    do {
      n = ::recv(sock_, chunk, sizeof(chunk), 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    buf_.append(chunk, size_t(n));
    return true;
  }
  // The end of the head (after its blank line) in buf_, searching from `from`, or npos.
  size_t head_end(size_t from) const {
    for (size_t i = from; i < buf_.size(); ++i) {
      if (buf_[i] != '\n') continue;
      if (i + 1 < buf_.size() && buf_[i + 1] == '\n') return i + 2;
      if (i + 2 < buf_.size() && buf_[i + 1] == '\r' && buf_[i + 2] == '\n') return i + 3;
    }
    return std::string::npos;
  }

  socket_t sock_;
  const ConnectionLimits& limits_;
  const std::atomic<bool>& draining_;
  std::string buf_;
  size_t pos_ = 0;
  size_t budget_ = 0;  // bytes the current request may still read
  Clock::time_point deadline_ = Clock::now();
  std::string remote_ip_, local_ip_;
  int remote_port_ = -1, local_port_ = -1;
};

// A whole response written straight to the socket (before or instead of httplib), then the connection closes.
void refuse(GuardStream& strm, int status, const char* reason, const std::string& message, const char* code) {
  const std::string body = error_json(status, message, "", code).dump();
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n";
  head += "Content-Type: application/json\r\nConnection: close\r\n";
  if (status == 503) head += "Retry-After: 1\r\n";
  head += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  strm.write((head + body).data(), head.size() + body.size());
}

}  // namespace

GuardedServer::GuardedServer(ConnectionLimits limits, const std::atomic<bool>& draining)
    : limits_(limits), draining_(draining) {}

bool GuardedServer::client_gone(const httplib::Request& req) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = sockets_.find({req.remote_addr, req.remote_port});
  return it == sockets_.end() || peer_closed(it->second.sock);
}

void GuardedServer::close_after_response(const httplib::Request& req) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = sockets_.find({req.remote_addr, req.remote_port});
  if (it != sockets_.end()) it->second.close_after_response = true;
}

bool GuardedServer::closes_after_response(const httplib::Request& req) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = sockets_.find({req.remote_addr, req.remote_port});
  return it != sockets_.end() && it->second.close_after_response;
}

int GuardedServer::open_connections() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return int(sockets_.size());
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  GuardStream strm(sock, limits_, draining_);
  std::string ip;
  int port = 0;
  strm.get_remote_ip_and_port(ip, port);
  bool over_cap = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    int& n = per_address_[ip];
    over_cap = n >= limits_.max_connections_per_client;
    if (!over_cap) {
      ++n;
      sockets_[{ip, port}] = Connection{sock};
    } else if (n == 0) {
      per_address_.erase(ip);
    }
  }
  if (over_cap) {
    refuse(strm, 503, "Service Unavailable",
           "too many connections from this address (at most " + std::to_string(limits_.max_connections_per_client) + ")",
           "too_many_connections");
  } else {
    size_t served = 0;
    for (;;) {
      const Head h = strm.read_head(served == 0 ? limits_.request_seconds : limits_.idle_seconds, served == 0);
      if (h == Head::kClosed || h == Head::kIdle) break;
      if (h == Head::kSlow) {
        refuse(strm, 408, "Request Timeout", "the request did not arrive in time", "request_timeout");
        break;
      }
      if (h == Head::kTooLarge) {
        refuse(strm, 431, "Request Header Fields Too Large",
               "the request head exceeds " + std::to_string(limits_.max_head_bytes) + " bytes or " +
                   std::to_string(limits_.max_headers) + " headers",
               "headers_too_large");
        break;
      }
      if (draining_.load()) {
        refuse(strm, 503, "Service Unavailable", "the server is shutting down", "server_shutting_down");
        break;
      }
      const bool close_after = ++served >= keep_alive_max_count_;
      bool connection_closed = false;
      const bool ok = process_request(strm, close_after, connection_closed, nullptr);
      bool refused_body = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        refused_body = sockets_.at({ip, port}).close_after_response;
      }
      if (!ok || connection_closed || close_after || refused_body) break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!over_cap) {
      sockets_.erase({ip, port});
      if (--per_address_[ip] <= 0) per_address_.erase(ip);
    }
  }
  linger_close(sock);
  return true;
}

}  // namespace ferry::server
