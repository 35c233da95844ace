#include "parallel/thread_communicator.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace ferry {

ThreadGroup::ThreadGroup(const ThreadGroupOptions& options)
    : ptrs(size_t(options.world)), partial(size_t(options.world)), options_(options) {
  FERRY_CHECK(options.world >= 1 && options.world <= 1024, "tensor-parallel world of {} ranks (1..1024)", options.world);
}

void ThreadGroup::arrive_and_wait(int rank, const char* what, bool wait_forever) {
  std::unique_lock lock(mu_);
  if (failed_) throw Error(failure_);
  const uint64_t gen = generation_;
  if (++arrived_ == options_.world) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  const auto done = [&] { return failed_ || generation_ != gen; };
  if (wait_forever) {
    cv_.wait(lock, done);
  } else if (!cv_.wait_for(lock, options_.timeout, done)) {
    lock.unlock();
    abort(rank, fmt::format("timed out after {:.1f} s waiting for the other ranks in {}",
                            std::chrono::duration<double>(options_.timeout).count(), what));
    lock.lock();
  }
  if (failed_) throw Error(failure_);
}

void ThreadGroup::abort(int rank, const std::string& why) noexcept {
  try {
    std::lock_guard lock(mu_);
    if (!failed_) {
      failed_ = true;
      failure_ = fmt::format("tensor-parallel rank {} failed: {}", rank, why);
    }
  } catch (...) {
  }
  cv_.notify_all();
}

void ThreadGroup::throw_if_failed() {
  std::lock_guard lock(mu_);
  if (failed_) throw Error(failure_);
}

void ThreadCommunicator::all_reduce_sum(const Tensor& x) {
  FERRY_ASSERT(x.dtype == DType::F32 && x.device == Device::Cpu);
  ThreadGroup& g = *group_;
  const int W = g.world();
  const size_t n = size_t(x.numel());
  // This rank's share of the elements: [lo, hi).
  const size_t per = (n + size_t(W) - 1) / size_t(W);
  const size_t lo = std::min(n, per * size_t(rank_)), hi = std::min(n, lo + per);
  g.ptrs[size_t(rank_)] = x.ptr<float>();
  g.partial[size_t(rank_)].resize(hi - lo);
  g.arrive_and_wait(rank_, "all_reduce (publish)", false);
  float* mine = g.partial[size_t(rank_)].data();
  for (size_t i = lo; i < hi; ++i) mine[i - lo] = g.ptrs[0][i];
  for (int r = 1; r < W; ++r) {  // rank order: every rank gets the same bits
    const float* src = g.ptrs[size_t(r)];
    for (size_t i = lo; i < hi; ++i) mine[i - lo] += src[i];
  }
  g.arrive_and_wait(rank_, "all_reduce (sum)", false);
  for (int r = 0; r < W; ++r) {
    const std::vector<float>& part = g.partial[size_t(r)];
    if (!part.empty()) std::memcpy(x.ptr<float>() + per * size_t(r), part.data(), part.size() * 4);
  }
  g.arrive_and_wait(rank_, "all_reduce (copy back)", false);
}

void ThreadCommunicator::all_gather_inplace(const Tensor& buf) {
  FERRY_ASSERT(buf.dtype == DType::F32 && buf.device == Device::Cpu);
  ThreadGroup& g = *group_;
  const int W = g.world();
  FERRY_ASSERT(buf.numel() % W == 0);
  const size_t part = size_t(buf.numel()) / size_t(W);
  g.ptrs[size_t(rank_)] = buf.ptr<float>();
  g.arrive_and_wait(rank_, "all_gather (publish)", false);
  for (int r = 0; r < W; ++r) {
    if (r != rank_) std::memcpy(buf.ptr<float>() + part * size_t(r), g.ptrs[size_t(r)] + part * size_t(r), part * 4);
  }
  g.arrive_and_wait(rank_, "all_gather (copy)", false);
}

void ThreadCommunicator::broadcast(std::vector<uint8_t>& bytes) {
  ThreadGroup& g = *group_;
  if (rank_ == 0) g.bytes = bytes;
  g.arrive_and_wait(rank_, "broadcast", rank_ != 0);  // followers wait for the next step without a timeout
  if (rank_ != 0) bytes = g.bytes;
  g.arrive_and_wait(rank_, "broadcast (copy)", false);
}

void ThreadCommunicator::barrier() { group_->arrive_and_wait(rank_, "barrier", false); }

std::vector<std::unique_ptr<Communicator>> make_thread_group(const ThreadGroupOptions& options) {
  auto group = std::make_shared<ThreadGroup>(options);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < options.world; ++r) out.push_back(std::make_unique<ThreadCommunicator>(group, r));
  return out;
}

}  // namespace ferry
