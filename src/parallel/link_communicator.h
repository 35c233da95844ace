// The CPU communicator of a group of processes (`mpirun -np N ferry ... --device cpu`): one rank per process,
// collectives over the HostLink (parallel/host_link.h), star-shaped through rank 0.
//
// all_reduce_sum: every follower sends its f32 tensor to rank 0; rank 0 sums element-wise in rank order
// 0..N-1 (the order ThreadCommunicator uses) and sends the sum back, so every rank holds the same bits.
// all_gather_inplace: the followers send their part, rank 0 assembles the whole buffer and sends it back.
// Collectives inside a step wait at most `timeout` (FERRY_TP_TIMEOUT); a timeout or a failure aborts the
// group: the other ranks are told (HostLink::send_abort) and every later collective throws.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "ops/communicator.h"
#include "parallel/host_link.h"

namespace ferry {

struct LinkCommunicatorOptions {
  HostLink* link = nullptr;  // outlives the communicator
  std::chrono::milliseconds timeout{300'000};
};

class LinkCommunicator final : public Communicator {
 public:
  explicit LinkCommunicator(const LinkCommunicatorOptions& options);
  int rank() const override { return link_->rank(); }
  int world() const override { return link_->world(); }
  void all_reduce_sum(const Tensor& x) override;
  void all_gather_inplace(const Tensor& buf) override;
  void broadcast(std::vector<uint8_t>& bytes) override;
  void barrier() override;
  void abort(const std::string& why) noexcept override;

 private:
  // Runs one collective: throws the group's failure first; a failure inside aborts the group.
  template <class Fn>
  void guarded(Fn&& fn);

  HostLink* link_;
  std::chrono::milliseconds timeout_;
  bool failed_ = false;  // the communicator is used by one thread (the rank's model thread)
  std::string failure_;
};

}  // namespace ferry
