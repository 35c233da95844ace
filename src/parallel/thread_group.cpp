#include "parallel/thread_group.h"

#include "parallel/thread_communicator.h"

namespace ferry {

ThreadTpGroup::ThreadTpGroup(int world, std::chrono::milliseconds timeout) {
  ThreadGroupOptions o;
  o.world = world;
  o.timeout = timeout;
  comms_ = make_thread_group(o);
}

void ThreadTpGroup::start(LlamaModel& leader, const MakeRank& make_follower) {
  FERRY_ASSERT(leader_ == nullptr);
  for (int r = 1; r < world(); ++r) ranks_.push_back(make_follower(r, *comms_[size_t(r)]));
  leader_ = &leader;
  for (int r = 1; r < world(); ++r) {
    threads_.emplace_back([this, r] {
      try {
        while (ranks_[size_t(r - 1)].model->follow()) {
        }
      } catch (const std::exception& e) {  // follow() has aborted the group; rank 0 throws it to its caller
        std::lock_guard lock(mu_);
        if (follower_error_.empty()) follower_error_ = e.what();
        error_cv_.notify_all();
      }
    });
  }
}

ThreadTpGroup::~ThreadTpGroup() {
  try {
    if (leader_ && !threads_.empty()) leader_->end_followers();
  } catch (const std::exception&) {  // the group failed: the followers have left their loops already
  }
  for (std::thread& t : threads_) t.join();
  ranks_.clear();  // models before their communicators
}

std::string ThreadTpGroup::follower_error() {
  std::lock_guard lock(mu_);
  return follower_error_;
}

std::string ThreadTpGroup::wait_follower_error(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  error_cv_.wait_for(lock, timeout, [&] { return !follower_error_.empty(); });
  return follower_error_;
}

}  // namespace ferry
