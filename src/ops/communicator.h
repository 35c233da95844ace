// Collectives between the ranks of a tensor-parallel group, and nothing else. The backend's sublayer ops sum a
// row-parallel projection's partial outputs with all_reduce_sum (Backend::SublayerEnd::group), the model sums the
// vocab-parallel embedding and gathers the vocab-parallel logits (all_gather_inplace); rank 0 broadcasts each
// step's Batch to the followers. Device collectives (all_reduce_sum, all_gather_inplace) are enqueued on the
// backend's stream like any op (a GPU implementation can be captured in a step graph); the host ones
// (broadcast, barrier) block the calling thread.
//
// Implementations: IdentityCommunicator (world 1: every collective is a no-op, so the model never branches on
// the degree of parallelism), ThreadCommunicator (N ranks as N threads of one process over CPU memory:
// tests and `--device cpu --tp N`), NcclCommunicator (one process per GPU). The interface is an op the model
// calls like any backend op, so it lives in src/ops; the implementations beyond the identity live in src/parallel
// (parallel/thread_communicator.h, parallel/nccl_communicator.h), which depends on ops and model, never the reverse.
//
// Failure: a rank that fails calls abort(why); every other rank's next (or current) collective throws
// ferry::Error naming the failed rank and its message, so a group never hangs on a dead member. Collectives
// that wait on other ranks mid-step time out (timeout in the implementation's options) with a clear error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ferry {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;

  // x: contiguous f32 tensor in backend memory, any shape; replaced by the element-wise sum over ranks
  // (the same bits on every rank).
  virtual void all_reduce_sum(const Tensor& x) = 0;
  // buf: contiguous f32 tensor of world * part elements in backend memory; rank r has filled elements
  // [r * part, (r + 1) * part); afterwards every rank holds every part.
  virtual void all_gather_inplace(const Tensor& buf) = 0;
  // Host bytes from rank 0 to every rank: rank 0's `bytes` are sent; the others' are replaced. Blocks until
  // this rank has them (followers may wait here indefinitely between steps: no timeout).
  virtual void broadcast(std::vector<uint8_t>& bytes) = 0;
  // Host barrier over all ranks (timeout applies).
  virtual void barrier() = 0;
  // Marks the group failed with `why` (prefixed with this rank); wakes every rank waiting in a collective.
  // Never throws. Later collectives throw ferry::Error with the first failure's message.
  virtual void abort(const std::string& why) noexcept = 0;
  // The model calls this when this rank's part of a step is done (a GPU implementation times steps out).
  virtual void step_done() {}
};

// World of one: nothing to exchange.
class IdentityCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  void all_reduce_sum(const Tensor&) override {}
  void all_gather_inplace(const Tensor&) override {}
  void broadcast(std::vector<uint8_t>&) override {}
  void barrier() override {}
  void abort(const std::string&) noexcept override {}
};

}  // namespace ferry
