#include "parallel/tcp_rendezvous.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/check.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x46595246;  // "FRYF": a ferry rank's hello / rank 0's answer
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxName = 255;       // host name bytes in a hello
constexpr uint32_t kMaxText = 4096;      // error text bytes in an answer
constexpr auto kHelloWait = std::chrono::seconds(5);  // a connection that says nothing is dropped after this
constexpr auto kConnectTry = std::chrono::milliseconds(2000);
constexpr auto kRetryPause = std::chrono::milliseconds(200);

// Owns a descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<int64_t>(left, 0, 1 << 30));
}

double seconds(std::chrono::milliseconds t) { return std::chrono::duration<double>(t).count(); }

// Reads exactly n bytes before `deadline`: false on end of stream, an error or the deadline.
bool read_until(int fd, void* p, size_t n, Clock::time_point deadline) {
  auto* c = static_cast<uint8_t*>(p);
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    const int left = ms_left(deadline);
    if (left == 0) return false;
    const int pr = ::poll(&pf, 1, left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return false;
    const ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

bool write_all(int fd, const std::vector<uint8_t>& b) {
  size_t at = 0;
  while (at < b.size()) {
    const ssize_t w = ::send(fd, b.data() + at, b.size() - at, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    at += size_t(w);
  }
  return true;
}

void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  const size_t at = b.size();
  b.resize(at + 4);
  std::memcpy(b.data() + at, &v, 4);
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return std::string(buf);
}

void tune(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // step messages are small and latency-bound
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));  // a vanished host is seen eventually
}

void set_blocking(int fd, bool blocking) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, blocking ? (flags & ~O_NONBLOCK) : (flags | O_NONBLOCK));
}

bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  if (a->sa_family == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
  return false;
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) ::freeaddrinfo(list);
  }
};

// getaddrinfo of a host:port; returns the error code (0: ok).
int resolve(const HostPort& hp, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  return ::getaddrinfo(hp.host.c_str(), std::to_string(hp.port).c_str(), &hints, &out.list);
}

// Rank 0's answer: [magic][status: 0 ok, 1 error][same host: 0/1][text length][text].
std::vector<uint8_t> answer(bool ok, bool same_host, const std::string& text) {
  std::vector<uint8_t> b;
  put_u32(b, kMagic);
  put_u32(b, ok ? 0 : 1);
  put_u32(b, same_host ? 1 : 0);
  const std::string t = text.substr(0, kMaxText);
  put_u32(b, uint32_t(t.size()));
  b.insert(b.end(), t.begin(), t.end());
  return b;
}

struct Hello {
  uint32_t magic = 0, version = 0, rank = 0, world = 0;
  std::string host;
};

// The listening socket of rank 0.
Fd listen_on(const TcpRendezvousOptions& o, const HostPort& hp) {
  AddrInfo ai;
  const int rc = resolve(hp, ai);
  FERRY_CHECK(rc == 0, "FERRY_TP_ADDR={}: cannot resolve '{}' on rank 0's host: {}", o.addr, hp.host, gai_strerror(rc));
  const addrinfo* a = ai.list;
  const bool loopback = is_loopback(a->ai_addr);
  FERRY_CHECK(!loopback || o.one_host,
              "FERRY_TP_ADDR={} is a loopback address on rank 0's host ({}), which ranks on other hosts cannot reach: "
              "pass mpirun -x FERRY_TP_ADDR=<rank-0 host>:<port> with a name or address the other hosts can reach",
              o.addr, host_name());
  if (!loopback) {  // the address must be this host's (else the others would knock on another machine's door)
    Fd probe(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    FERRY_CHECK(probe.get() >= 0, "socket: {}", std::strerror(errno));
    sockaddr_storage sa{};
    std::memcpy(&sa, a->ai_addr, a->ai_addrlen);
    if (a->ai_family == AF_INET) reinterpret_cast<sockaddr_in*>(&sa)->sin_port = 0;
    if (a->ai_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port = 0;
    FERRY_CHECK(::bind(probe.get(), reinterpret_cast<sockaddr*>(&sa), a->ai_addrlen) == 0,
                "FERRY_TP_ADDR={}: '{}' is not an address of rank 0's host ({}): {}; pass the host rank 0 runs on",
                o.addr, hp.host, host_name(), std::strerror(errno));
  }
  Fd fd(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  FERRY_CHECK(fd.get() >= 0, "socket: {}", std::strerror(errno));
  const int one = 1, zero = 0;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage sa{};
  socklen_t len = 0;
  if (loopback) {  // one host: listen on loopback only
    std::memcpy(&sa, a->ai_addr, a->ai_addrlen);
    len = a->ai_addrlen;
  } else if (a->ai_family == AF_INET6) {  // every interface (the name may resolve differently elsewhere)
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&sa);
    s6->sin6_family = AF_INET6;
    s6->sin6_addr = in6addr_any;
    s6->sin6_port = htons(uint16_t(hp.port));
    len = sizeof(sockaddr_in6);
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&sa);
    s4->sin_family = AF_INET;
    s4->sin_addr.s_addr = htonl(INADDR_ANY);
    s4->sin_port = htons(uint16_t(hp.port));
    len = sizeof(sockaddr_in);
  }
  FERRY_CHECK(::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), len) == 0,
              "tensor-parallel rank 0: cannot listen on {}: {} (another job on that port? choose another with "
              "FERRY_TP_ADDR=<host>:<port>)",
              o.addr, std::strerror(errno));
  FERRY_CHECK(::listen(fd.get(), o.world + 16) == 0, "tensor-parallel rank 0: listen on {}: {}", o.addr,
              std::strerror(errno));
  return fd;
}

TcpRendezvous accept_ranks(const TcpRendezvousOptions& o, const HostPort& hp) {
  const auto deadline = Clock::now() + o.timeout;
  Fd listener = listen_on(o, hp);
  std::vector<Fd> by_rank(size_t(o.world));  // [1..world-1]
  std::vector<std::string> hosts(size_t(o.world));
  hosts[0] = host_name();
  // Tells `extra` and every accepted rank why the group cannot form, then fails with the same message.
  const auto reject = [&](Fd& extra, const std::string& why) {
    const auto msg = answer(false, false, why);
    if (extra.get() >= 0) write_all(extra.get(), msg);
    for (auto& f : by_rank)
      if (f.get() >= 0) write_all(f.get(), msg);
    fail("{}", why);
  };
  int have = 0;
  while (have < o.world - 1) {
    const int left = ms_left(deadline);
    if (left == 0) {
      std::string missing;
      for (int r = 1; r < o.world; ++r)
        if (by_rank[size_t(r)].get() < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      Fd none;
      reject(none, fmt::format("tensor-parallel rank 0: only {} of the other {} ranks connected to {} within {:.0f} s "
                               "(FERRY_TP_TIMEOUT); missing rank(s): {}",
                               have, o.world - 1, o.addr, seconds(o.timeout), missing));
    }
    pollfd pf{listener.get(), POLLIN, 0};
    const int pr = ::poll(&pf, 1, left);
    if (pr <= 0) continue;
    Fd c(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (c.get() < 0) continue;
    uint32_t h[5] = {};  // magic, version, rank, world, host name length
    const auto hello_deadline = std::min(deadline, Clock::now() + kHelloWait);
    if (!read_until(c.get(), h, sizeof(h), hello_deadline) || h[0] != kMagic || h[4] > kMaxName) {
      std::fprintf(stderr, "ferry: tensor-parallel rank 0: dropped a connection to %s that is not a ferry rank\n",
                   o.addr.c_str());
      continue;
    }
    std::string host(h[4], '\0');
    if (h[4] > 0 && !read_until(c.get(), host.data(), host.size(), hello_deadline)) continue;
    const Hello hi{h[0], h[1], h[2], h[3], host};
    if (hi.version != kVersion)
      reject(c, fmt::format("tensor-parallel rank {} (host {}) speaks rendezvous version {}, rank 0 version {}: run "
                            "the same ferry binary on every host",
                            hi.rank, hi.host, hi.version, kVersion));
    if (int(hi.world) != o.world)
      reject(c, fmt::format("tensor-parallel rank {} (host {}) joined {} with a world of {} ranks, rank 0 has {}: "
                            "another job on the same FERRY_TP_ADDR?",
                            hi.rank, hi.host, o.addr, hi.world, o.world));
    if (hi.rank < 1 || int(hi.rank) >= o.world)
      reject(c, fmt::format("tensor-parallel rank {} (host {}) is outside a world of {}", hi.rank, hi.host, o.world));
    if (by_rank[hi.rank].get() >= 0)
      reject(c, fmt::format("tensor-parallel rank {} joined {} twice (hosts {} and {}): another job on the same "
                            "FERRY_TP_ADDR?",
                            hi.rank, o.addr, hosts[hi.rank], hi.host));
    tune(c.get());
    hosts[hi.rank] = hi.host;
    by_rank[hi.rank] = std::move(c);
    ++have;
  }
  TcpRendezvous out;
  out.same_host = std::all_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h == hosts[0]; });
  const auto ok = answer(true, out.same_host, "");
  for (int r = 1; r < o.world; ++r) {
    FERRY_CHECK(write_all(by_rank[size_t(r)].get(), ok), "tensor-parallel rank {} closed its connection to rank 0", r);
  }
  for (int r = 1; r < o.world; ++r) out.fds.push_back(by_rank[size_t(r)].release());
  return out;
}

// One attempt to connect to `a` within `limit`: the socket, or -1 with `error` set.
Fd try_connect(const addrinfo* a, Clock::time_point limit, std::string& error) {
  Fd fd(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) {
    error = std::strerror(errno);
    return Fd();
  }
  set_blocking(fd.get(), false);
  if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      error = std::strerror(errno);
      return Fd();
    }
    pollfd pf{fd.get(), POLLOUT, 0};
    if (::poll(&pf, 1, std::max(1, ms_left(limit))) <= 0) {
      error = "connection attempt timed out";
      return Fd();
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      error = std::strerror(err);
      return Fd();
    }
  }
  set_blocking(fd.get(), true);
  return fd;
}

TcpRendezvous join_rank0(const TcpRendezvousOptions& o, const HostPort& hp) {
  const auto deadline = Clock::now() + o.timeout;
  std::string error = "not tried";
  Fd fd;
  while (fd.get() < 0) {
    FERRY_CHECK(Clock::now() < deadline,
                "tensor-parallel rank {}: could not reach rank 0 at {} within {:.0f} s (FERRY_TP_TIMEOUT): {}; check "
                "that rank 0 started and FERRY_TP_ADDR names its host and a free port",
                o.rank, o.addr, seconds(o.timeout), error);
    AddrInfo ai;
    const int rc = resolve(hp, ai);
    FERRY_CHECK(rc == 0 || rc == EAI_AGAIN, "FERRY_TP_ADDR={}: cannot resolve '{}' on tensor-parallel rank {}'s host: {}",
                o.addr, hp.host, o.rank, gai_strerror(rc));
    if (rc != 0) error = gai_strerror(rc);
    for (const addrinfo* a = rc == 0 ? ai.list : nullptr; a != nullptr && fd.get() < 0; a = a->ai_next)
      fd = try_connect(a, std::min(deadline, Clock::now() + kConnectTry), error);
    if (fd.get() < 0) std::this_thread::sleep_for(kRetryPause);
  }
  tune(fd.get());
  const std::string host = host_name().substr(0, kMaxName);
  std::vector<uint8_t> hello;
  for (uint32_t v : {kMagic, kVersion, uint32_t(o.rank), uint32_t(o.world), uint32_t(host.size())}) put_u32(hello, v);
  hello.insert(hello.end(), host.begin(), host.end());
  FERRY_CHECK(write_all(fd.get(), hello), "tensor-parallel rank {}: sending to rank 0 at {} failed: {}", o.rank, o.addr,
              std::strerror(errno));
  uint32_t a[4] = {};  // magic, status, same host, text length
  if (!read_until(fd.get(), a, sizeof(a), deadline)) {
    FERRY_CHECK(Clock::now() < deadline,
                "tensor-parallel rank {}: rank 0 at {} did not answer within {:.0f} s (FERRY_TP_TIMEOUT: are all {} "
                "ranks started, and is {} a ferry rank 0?)",
                o.rank, o.addr, seconds(o.timeout), o.world, o.addr);
    fail("tensor-parallel rank {}: rank 0 at {} closed the connection before the group formed (did it fail?)",
         o.rank, o.addr);
  }
  FERRY_CHECK(a[0] == kMagic && a[3] <= kMaxText, "tensor-parallel rank {}: {} is not a ferry rank 0 (FERRY_TP_ADDR)",
              o.rank, o.addr);
  std::string text(a[3], '\0');
  if (a[3] > 0 && !read_until(fd.get(), text.data(), text.size(), deadline)) text = "(message cut off)";
  FERRY_CHECK(a[1] == 0, "{}", text);
  TcpRendezvous out;
  out.same_host = a[2] == 1;
  out.fds.push_back(fd.release());
  return out;
}

}  // namespace

HostPort parse_host_port(const std::string& addr, const char* what) {
  HostPort hp;
  std::string port;
  if (!addr.empty() && addr[0] == '[') {
    const size_t close = addr.find(']');
    FERRY_CHECK(close != std::string::npos && close + 1 < addr.size() && addr[close + 1] == ':',
                "{}='{}': expected [address]:port", what, addr);
    hp.host = addr.substr(1, close - 1);
    port = addr.substr(close + 2);
  } else {
    const size_t colon = addr.rfind(':');
    FERRY_CHECK(colon != std::string::npos && colon > 0 && addr.find(':') == colon,
                "{}='{}': expected host:port (e.g. node0:29517)", what, addr);
    hp.host = addr.substr(0, colon);
    port = addr.substr(colon + 1);
  }
  FERRY_CHECK(!hp.host.empty() && !port.empty() && port.size() <= 5 &&
                  std::all_of(port.begin(), port.end(), [](char ch) { return ch >= '0' && ch <= '9'; }),
              "{}='{}': expected host:port with a port number", what, addr);
  hp.port = std::stoi(port);
  FERRY_CHECK(hp.port >= 1 && hp.port <= 65535, "{}='{}': port {} out of range (1..65535)", what, addr, hp.port);
  return hp;
}

TcpRendezvous tcp_rendezvous(const TcpRendezvousOptions& o) {
  FERRY_CHECK(o.world >= 2 && o.rank >= 0 && o.rank < o.world, "tensor-parallel rank {} outside a world of {}", o.rank,
              o.world);
  const HostPort hp = parse_host_port(o.addr, "FERRY_TP_ADDR");
  return o.rank == 0 ? accept_ranks(o, hp) : join_rank0(o, hp);
}

}  // namespace ferry
