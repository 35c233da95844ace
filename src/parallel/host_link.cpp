#include "parallel/host_link.h"

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <sys/socket.h>
#include <unistd.h>

#include "core/check.h"

namespace ferry {
namespace {

enum class Kind : uint32_t { Step = 1, BarrierArrive = 2, BarrierRelease = 3, Abort = 4, GatherPart = 5 };

struct Header {
  uint32_t kind;
  uint32_t reserved;
  uint64_t bytes;
};

constexpr uint64_t kMaxMessage = uint64_t(1) << 30;  // a step message is far smaller; larger is corruption

bool write_all(int fd, const void* p, size_t n) {
  const auto* c = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= size_t(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  auto* c = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

class SocketLink final : public HostLink {
 public:
  SocketLink(int rank, int world, std::vector<int> fds) : rank_(rank), world_(world), fds_(std::move(fds)) {
    FERRY_ASSERT(int(fds_.size()) == (rank == 0 ? world - 1 : 1));
    for (size_t i = 0; i < fds_.size(); ++i) readers_.emplace_back([this, i] { read_loop(i); });
  }
  ~SocketLink() override {
    {
      std::lock_guard lock(mu_);
      closing_ = true;
    }
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);  // wakes the readers
    for (auto& t : readers_) t.join();
    for (int fd : fds_) ::close(fd);
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }

  void broadcast(std::vector<uint8_t>& bytes) override { receive_or_send(bytes, std::nullopt); }

  void broadcast_within(std::vector<uint8_t>& bytes, std::chrono::milliseconds timeout) override {
    FERRY_ASSERT(rank_ != 0 || !bytes.empty());
    receive_or_send(bytes, timeout);
  }

  std::vector<std::vector<uint8_t>> gather(const std::vector<uint8_t>& mine, std::chrono::milliseconds timeout) override {
    return gather_parts(mine, timeout);
  }

  void barrier() override {
    if (rank_ == 0) {
      std::unique_lock lock(mu_);
      const uint64_t want = ++barrier_gen_ * uint64_t(world_ - 1);
      cv_.wait(lock, [&] { return failed_ || arrived_ >= want; });
      if (failed_) throw Error(failure_);
      lock.unlock();
      for (size_t i = 0; i < fds_.size(); ++i) send(i, Kind::BarrierRelease, nullptr, 0);
      return;
    }
    send(0, Kind::BarrierArrive, nullptr, 0);
    std::unique_lock lock(mu_);
    const uint64_t want = ++barrier_gen_;
    cv_.wait(lock, [&] { return failed_ || released_ >= want; });
    if (failed_) throw Error(failure_);
  }

  std::vector<std::vector<uint8_t>> all_gather(const std::vector<uint8_t>& mine) override {
    std::vector<std::vector<uint8_t>> all(static_cast<size_t>(world_));
    std::vector<uint8_t> packed;
    if (rank_ == 0) {
      all = gather_parts(mine, std::nullopt);
      for (const auto& a : all) {  // [u64 length][bytes] per rank
        const uint64_t n = a.size();
        packed.insert(packed.end(), reinterpret_cast<const uint8_t*>(&n), reinterpret_cast<const uint8_t*>(&n) + 8);
        packed.insert(packed.end(), a.begin(), a.end());
      }
      for (size_t i = 0; i < fds_.size(); ++i) send(i, Kind::Step, packed.data(), packed.size());
      return all;
    }
    send(0, Kind::GatherPart, mine.data(), mine.size());
    broadcast(packed);
    size_t at = 0;
    for (auto& a : all) {
      uint64_t n = 0;
      FERRY_CHECK(at + 8 <= packed.size(), "tensor-parallel rank {}: bad all-gather message", rank_);
      std::memcpy(&n, packed.data() + at, 8);
      at += 8;
      FERRY_CHECK(n <= packed.size() - at, "tensor-parallel rank {}: bad all-gather message", rank_);
      a.assign(packed.begin() + std::ptrdiff_t(at), packed.begin() + std::ptrdiff_t(at + n));
      at += n;
    }
    return all;
  }

  void send_abort(const std::string& why) noexcept override {
    for (size_t i = 0; i < fds_.size(); ++i) {
      try {
        send(i, Kind::Abort, why.data(), why.size());
      } catch (...) {
      }
    }
  }

  void set_on_failure(std::function<void(const std::string&)> f) override {
    std::lock_guard lock(mu_);
    on_failure_ = std::move(f);
  }

 private:
  int peer_of(size_t i) const { return rank_ == 0 ? int(i) + 1 : 0; }

  // Waits on cv_ until done() or a failure (throws); with a timeout, throws when it passes first.
  template <class Done>
  void wait(std::unique_lock<std::mutex>& lock, std::optional<std::chrono::milliseconds> timeout, Done done,
            const char* what) {
    const auto ok = [&] { return failed_ || done(); };
    if (!timeout) {
      cv_.wait(lock, ok);
    } else if (!cv_.wait_for(lock, *timeout, ok)) {
      throw Error(fmt::format("tensor-parallel rank {}: timed out after {:.1f} s waiting for {} (FERRY_TP_TIMEOUT)",
                                      rank_, std::chrono::duration<double>(*timeout).count(), what));
    }
    if (failed_) throw Error(failure_);
  }

  // rank 0 sends `bytes` to every follower; a follower receives the next message from rank 0.
  void receive_or_send(std::vector<uint8_t>& bytes, std::optional<std::chrono::milliseconds> timeout) {
    if (rank_ == 0) {
      if (bytes.empty()) {  // the stop message (batch_codec.h): the followers' exits that follow are expected
        std::lock_guard lock(mu_);
        closing_ = true;
      }
      for (size_t i = 0; i < fds_.size(); ++i) send(i, Kind::Step, bytes.data(), bytes.size());
      return;
    }
    std::unique_lock lock(mu_);
    wait(lock, timeout, [&] { return !steps_.empty(); }, "rank 0");
    bytes = std::move(steps_.front());
    steps_.pop_front();
    if (bytes.empty()) closing_ = true;  // rank 0 ends the group: its exit that follows is expected
  }

  // rank 0: every rank's part in rank order; a follower: sends its part, returns {}.
  std::vector<std::vector<uint8_t>> gather_parts(const std::vector<uint8_t>& mine,
                                                 std::optional<std::chrono::milliseconds> timeout) {
    if (rank_ != 0) {
      send(0, Kind::GatherPart, mine.data(), mine.size());
      return {};
    }
    std::vector<std::vector<uint8_t>> all(static_cast<size_t>(world_));
    all[0] = mine;
    std::unique_lock lock(mu_);
    wait(lock, timeout, [&] { return parts_.size() == fds_.size(); }, "the other ranks' parts");
    for (auto& [peer, bytes] : parts_) all[size_t(peer)] = std::move(bytes);
    parts_.clear();
    return all;
  }

  void send(size_t i, Kind kind, const void* p, size_t n) {
    const Header h{uint32_t(kind), 0, uint64_t(n)};
    std::lock_guard lock(write_mu_);
    FERRY_CHECK(write_all(fds_[i], &h, sizeof(h)) && (n == 0 || write_all(fds_[i], p, n)),
                "tensor-parallel rank {} is gone (sending to it failed: {})", peer_of(i), std::strerror(errno));
  }

  void fail(const std::string& why) {
    std::function<void(const std::string&)> f;
    {
      std::lock_guard lock(mu_);
      if (failed_ || closing_) return;
      failed_ = true;
      failure_ = why;
      f = on_failure_;
    }
    cv_.notify_all();
    if (f) f(why);
  }

  void read_loop(size_t i) {
    const int peer = peer_of(i);
    for (;;) {
      Header h{};
      if (!read_all(fds_[i], &h, sizeof(h))) {
        fail(fmt::format("tensor-parallel rank {} exited or closed its connection", peer));
        return;
      }
      if (h.bytes > kMaxMessage) {
        fail(fmt::format("tensor-parallel rank {} sent a corrupt message ({} bytes)", peer, h.bytes));
        return;
      }
      std::vector<uint8_t> payload(size_t(h.bytes));
      if (h.bytes > 0 && !read_all(fds_[i], payload.data(), payload.size())) {
        fail(fmt::format("tensor-parallel rank {} exited mid-message", peer));
        return;
      }
      switch (Kind(h.kind)) {
        case Kind::Step: {
          std::lock_guard lock(mu_);
          // The stop message: rank 0's exit that follows is expected, even before this rank has taken the
          // message from the queue (else the reader's end-of-stream would fail the group first).
          if (payload.empty()) closing_ = true;
          steps_.push_back(std::move(payload));
          break;
        }
        case Kind::BarrierArrive: {
          std::lock_guard lock(mu_);
          ++arrived_;
          break;
        }
        case Kind::GatherPart: {
          std::lock_guard lock(mu_);
          parts_.emplace_back(peer, std::move(payload));
          break;
        }
        case Kind::BarrierRelease: {
          std::lock_guard lock(mu_);
          ++released_;
          break;
        }
        case Kind::Abort:
          fail(std::string(payload.begin(), payload.end()));
          return;
        default:
          fail(fmt::format("tensor-parallel rank {} sent an unknown message kind {}", peer, h.kind));
          return;
      }
      cv_.notify_all();
    }
  }

  int rank_, world_;
  std::vector<int> fds_;
  std::vector<std::thread> readers_;
  std::mutex mu_, write_mu_;
  std::condition_variable cv_;
  std::deque<std::vector<uint8_t>> steps_;
  std::vector<std::pair<int, std::vector<uint8_t>>> parts_;  // rank 0: all_gather parts received (peer, bytes)
  uint64_t arrived_ = 0, released_ = 0, barrier_gen_ = 0;
  bool failed_ = false, closing_ = false;
  std::string failure_;
  std::function<void(const std::string&)> on_failure_;
};

}  // namespace

std::unique_ptr<HostLink> make_socket_link(int rank, int world, std::vector<int> fds) {
  return std::make_unique<SocketLink>(rank, world, std::move(fds));
}

}  // namespace ferry
