// N tensor-parallel ranks of one model in one process (the CPU path: tests and `--device cpu --tp N`):
// rank 0 belongs to the caller, who drives it (forward); ranks 1..N-1 run LlamaModel::follow() loops on
// their own threads. The ranks talk through a ThreadCommunicator group.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "model/llama_model.h"
#include "ops/backend.h"

namespace ferry {

struct RankModel {
  std::unique_ptr<Backend> backend;  // declared first: destroyed after the model that uses it
  std::unique_ptr<LlamaModel> model;
};

class ThreadTpGroup {
 public:
  // make_rank(rank, comm): builds rank `rank`'s backend and model (its shard, with comm in its
  // ParallelContext); called for every rank on the caller's thread, rank 0 first. Throws what it throws.
  using MakeRank = std::function<RankModel(int rank, Communicator& comm)>;
  ThreadTpGroup(int world, const MakeRank& make_rank, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~ThreadTpGroup();  // ends the followers and joins them
  ThreadTpGroup(const ThreadTpGroup&) = delete;
  ThreadTpGroup& operator=(const ThreadTpGroup&) = delete;

  int world() const { return int(comms_.size()); }
  LlamaModel& leader() { return *ranks_[0].model; }
  Backend& leader_backend() { return *ranks_[0].backend; }
  RankModel& rank(int r) { return ranks_[size_t(r)]; }
  // The first failure a follower thread saw (empty while none).
  std::string follower_error();

 private:
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<RankModel> ranks_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::string follower_error_;
};

}  // namespace ferry
