// The GPU communicator: one process per GPU, NCCL collectives enqueued on the CUDA backend's stream (so a
// decode step with its all-reduces is captured in one CUDA graph), host messages over a HostLink.
//
// Failure handling (no rank ever hangs): a watchdog thread polls ncclCommGetAsyncError and the age of the
// current step (FERRY_TP_TIMEOUT seconds, default 300); the link's reader threads see a peer's abort notice
// or its death (socket closed). On any of these the rank prints one line "ferry: tensor-parallel rank R:
// <why>" to stderr, tells the other ranks, calls ncclCommAbort and exits with status 3 (a rank blocked
// inside a collective cannot be unwound safely). abort() (an exception on this rank) tells the others and
// aborts the communicator; the exception then reaches the command, which reports it.
// Compiled only with NCCL (FERRY_HAS_NCCL).
#pragma once

#ifdef FERRY_HAS_NCCL

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ops/communicator.h"
#include "parallel/host_link.h"

struct CUstream_st;
struct ncclComm;

namespace ferry {

struct NcclCommunicatorOptions {
  HostLink* link = nullptr;      // outlives the communicator
  CUstream_st* stream = nullptr;  // the backend's stream (CudaBackend::stream()); its device is current
  std::chrono::seconds timeout{300};
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective over all ranks of the link: rank 0 makes the NCCL unique id and broadcasts it over the link.
  explicit NcclCommunicator(const NcclCommunicatorOptions& options);
  ~NcclCommunicator() override;  // ncclCommDestroy (ncclCommAbort after a failure)
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return link_->rank(); }
  int world() const override { return link_->world(); }
  void all_reduce_sum(const Tensor& x) override;
  void all_gather_inplace(const Tensor& buf) override;
  void broadcast(std::vector<uint8_t>& bytes) override;
  void barrier() override;
  void abort(const std::string& why) noexcept override;
  void step_done() override;

  // Small messages: `small(x, n, stream)` sums x ([n] f32 on this rank's device) over the ranks when it takes
  // the size (returns true), else NCCL does. engine/tp_setup installs the peer all-reduce
  // (backends/cuda/comm/peer_all_reduce.h) here on every rank alike, before the first step (and hands it to the
  // CUDA backend too, whose sublayer ends fuse it with the residual add and norm).
  using SmallAllReduce = std::function<bool(float* x, size_t n, CUstream_st* stream)>;
  void set_small_all_reduce(SmallAllReduce small) { small_ = std::move(small); }

 private:
  [[noreturn]] void die(const std::string& why) noexcept;  // the watchdog's and the link's way out
  void watch();

  HostLink* link_;
  CUstream_st* stream_;
  std::chrono::seconds timeout_;
  ncclComm* comm_ = nullptr;
  SmallAllReduce small_;
  std::atomic<bool> stop_{false}, failed_{false};
  std::atomic<int64_t> step_started_ns_{0};  // steady-clock ns when the current step began; 0: idle
  std::mutex fail_mu_;
  std::string failure_;
  std::thread watchdog_;
};

}  // namespace ferry

#endif  // FERRY_HAS_NCCL
