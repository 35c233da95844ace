// Host-side messages between the processes of a tensor-parallel group: rank 0 broadcasts each step's Batch
// (and, first, the NCCL unique id), barriers, and failure notices; on the CPU (parallel/link_communicator.h) also
// the collectives' f32 payloads. A star of stream sockets, rank 0 to each follower: the single-host launcher's
// socketpairs, or TCP connections made under mpirun (parallel/tcp_rendezvous.h).
//
// Every link has a reader thread per peer, so a peer's death (its socket closes) or its abort notice is seen
// at once even while this rank is blocked in a GPU collective: on_failure(why) is called on that thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ferry {

class HostLink {
 public:
  virtual ~HostLink() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // From rank 0 to all: rank 0's bytes are sent, the others' replaced. Followers wait without a timeout.
  virtual void broadcast(std::vector<uint8_t>& bytes) = 0;
  virtual void barrier() = 0;
  // Every rank's `mine` in rank order, on every rank (setup only, e.g. the peer all-reduce's IPC handles: not
  // while steps are in flight). Followers send theirs to rank 0, which broadcasts them all.
  virtual std::vector<std::vector<uint8_t>> all_gather(const std::vector<uint8_t>& mine) = 0;
  // Rank 0: every rank's `mine` in rank order (waits at most `timeout` for the followers' parts, else throws);
  // a follower: sends `mine` to rank 0 and returns an empty vector. Any time (steps included).
  virtual std::vector<std::vector<uint8_t>> gather(const std::vector<uint8_t>& mine,
                                                   std::chrono::milliseconds timeout) = 0;
  // broadcast() for use inside a step: a follower waits at most `timeout` (then throws). `bytes` must not be
  // empty on rank 0 (an empty broadcast is the stop message).
  virtual void broadcast_within(std::vector<uint8_t>& bytes, std::chrono::milliseconds timeout) = 0;
  // Best effort: tells the other ranks that this one failed with `why`. Never throws.
  virtual void send_abort(const std::string& why) noexcept = 0;
  // Called once, from a link thread, when a peer fails (its abort notice) or dies (its socket closed).
  virtual void set_on_failure(std::function<void(const std::string& why)> on_failure) = 0;
};

// rank 0: fds = sockets to ranks 1..N-1 in order; a follower: fds = {its socket to rank 0}. Takes ownership.
std::unique_ptr<HostLink> make_socket_link(int rank, int world, std::vector<int> fds);


}  // namespace ferry
