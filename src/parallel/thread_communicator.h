// N ranks as N threads of one process, exchanging through shared CPU memory (the CPU backend runs ops
// synchronously, so a collective is a rendezvous of the rank threads). Used by the tests and by
// `--device cpu --tp N`. Each rank holds its own ThreadCommunicator, made by ThreadGroup::member(r).
//
// all_reduce_sum: every rank publishes its buffer; rank r sums elements of its share over ranks 0..N-1 in
// rank order into a shared result (so every rank gets the same bits); everyone copies the result back.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ops/communicator.h"

namespace ferry {

struct ThreadGroupOptions {
  int world = 1;
  // How long a rank waits for the others inside a step (all_reduce, all_gather, barrier) before failing
  // the group; broadcast (followers waiting for the next step) does not time out.
  std::chrono::milliseconds timeout{60'000};
};

// The shared state of one group (owned by a shared_ptr held by every member).
class ThreadGroup {
 public:
  explicit ThreadGroup(const ThreadGroupOptions& options);
  int world() const { return options_.world; }

  // Rendezvous: blocks until all ranks arrive (or the group fails / times out: throws). `wait_forever`
  // disables the timeout. Returns after every rank arrived; the phase is then complete.
  void arrive_and_wait(int rank, const char* what, bool wait_forever);
  void abort(int rank, const std::string& why) noexcept;
  void throw_if_failed();

  // Slots the ranks publish into between two rendezvous points.
  std::vector<float*> ptrs;                  // (world) each rank's buffer
  std::vector<std::vector<float>> partial;   // (world) rank r's share of a reduction
  std::vector<uint8_t> bytes;                // broadcast payload

 private:
  ThreadGroupOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool failed_ = false;
  std::string failure_;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return group_->world(); }
  void all_reduce_sum(const Tensor& x) override;
  void all_gather_inplace(const Tensor& buf) override;
  void broadcast(std::vector<uint8_t>& bytes) override;
  void barrier() override;
  void abort(const std::string& why) noexcept override { group_->abort(rank_, why); }

 private:
  std::shared_ptr<ThreadGroup> group_;
  int rank_;
};

// A group of `options.world` communicators, one per rank thread.
std::vector<std::unique_ptr<Communicator>> make_thread_group(const ThreadGroupOptions& options);

}  // namespace ferry
