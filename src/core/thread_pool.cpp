#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

constexpr auto kSpin = std::chrono::microseconds(100);  // how long an idle worker spins before sleeping
// Polls with a pause before a waiting thread starts yielding its core at every poll: on a machine with
// more runnable threads than cores the thread it waits for may be the one that needs the core.
constexpr int kPollsBeforeYield = 1024;

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(2);
  {
    std::lock_guard<std::mutex> lock(mutex_);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work() {
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1);
    if (c >= n_chunks_) return;
    (*fn_)(c);
    done_chunks_.fetch_add(1);
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    // Wait for a newer published job: spin a little, then sleep.
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    int polls = 0;
    for (;;) {
      const uint64_t g = generation_.load();
      if (g != seen && g % 2 == 0) break;
      if (stop_.load()) return;
      ++polls;
      if (polls % 64 == 0 && std::chrono::steady_clock::now() > spin_until) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] {
          const uint64_t g2 = generation_.load();
          return stop_.load() || (g2 != seen && g2 % 2 == 0);
        });
        sleepers_.fetch_sub(1);
        continue;
      }
      if (polls > kPollsBeforeYield) {
        std::this_thread::yield();
      } else {
        cpu_relax();
      }
    }
    if (stop_.load()) return;
    inside_.fetch_add(1);
    const uint64_t g = generation_.load();
    if (g % 2 == 0 && g != seen) {
      seen = g;
      work();
    }
    inside_.fetch_sub(1);
  }
}

void ThreadPool::run_chunks(int64_t n_chunks, const std::function<void(int64_t)>& fn) {
  if (n_chunks <= 0) return;
  if (n_threads_ == 1 || n_chunks == 1) {
    for (int64_t c = 0; c < n_chunks; ++c) fn(c);
    return;
  }
  // Prepare: mark the job slot busy (odd), wait for stragglers of the previous job to leave, fill it in.
  generation_.fetch_add(1);
  while (inside_.load() != 0) cpu_relax();
  fn_ = &fn;
  n_chunks_ = n_chunks;
  next_chunk_.store(0);
  done_chunks_.store(0);
  generation_.fetch_add(1);  // publish (even)
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }
  work();
  for (int polls = 0; done_chunks_.load() < n_chunks; ++polls) {
    if (polls > kPollsBeforeYield) {
      std::this_thread::yield();  // a worker holding a chunk may be waiting for this core
    } else {
      cpu_relax();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  // A few chunks per thread so that a late or slow thread's share is taken by the others.
  const int64_t target = std::max<int64_t>(1, n / (int64_t(n_threads_) * 4));
  const int64_t chunk = std::max(grain, (target + grain - 1) / grain * grain);
  const int64_t n_chunks = (n + chunk - 1) / chunk;
  run_chunks(n_chunks, [&](int64_t c) { fn(c * chunk, std::min(n, (c + 1) * chunk)); });
}

}  // namespace ferry
