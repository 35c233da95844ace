// N tensor-parallel ranks of one model in one process (the CPU path: tests and `--device cpu --tp N`):
// rank 0 belongs to the caller, who builds it with comm(0) and drives it (forward); start() builds ranks
// 1..N-1 and runs their LlamaModel::follow() loops on threads. The ranks talk through a ThreadCommunicator
// group. Destroy the group before rank 0's model (it ends the followers through it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/llama_model.h"
#include "ops/backend.h"
#include "ops/communicator.h"

namespace ferry {

struct RankModel {
  std::unique_ptr<Backend> backend;  // declared first: destroyed after the model that uses it
  std::unique_ptr<LlamaModel> model;
};

class ThreadTpGroup {
 public:
  explicit ThreadTpGroup(int world, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~ThreadTpGroup();  // ends the followers (through the leader) and joins them
  ThreadTpGroup(const ThreadTpGroup&) = delete;
  ThreadTpGroup& operator=(const ThreadTpGroup&) = delete;

  int world() const { return int(comms_.size()); }
  Communicator& comm(int rank) { return *comms_[size_t(rank)]; }
  // make_follower(rank, comm): builds rank `rank`'s backend and model (its shard, comm in its ParallelContext);
  // called on the caller's thread for ranks 1..N-1, then their loops start. `leader`: rank 0's model.
  using MakeRank = std::function<RankModel(int rank, Communicator& comm)>;
  void start(LlamaModel& leader, const MakeRank& make_follower);
  RankModel& follower(int rank) { return ranks_[size_t(rank - 1)]; }
  // The first failure a follower thread saw (empty while none). A follower aborts the group before its thread
  // records the error, so rank 0 may see the failure first: wait_follower_error waits up to `timeout` for it.
  std::string follower_error();
  std::string wait_follower_error(std::chrono::milliseconds timeout);

 private:
  std::vector<std::unique_ptr<Communicator>> comms_;
  LlamaModel* leader_ = nullptr;
  std::vector<RankModel> ranks_;  // ranks 1..N-1
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable error_cv_;  // signalled when follower_error_ is set
  std::string follower_error_;
};

}  // namespace ferry
