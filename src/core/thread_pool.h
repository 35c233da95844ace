// A fixed pool of worker threads for data-parallel loops. The calling thread takes part as worker 0.
//
// Work is handed out in chunks from an atomic counter, so a worker that the OS has not scheduled yet
// (a busy 2-core machine) delays nothing: the others take its chunks. The caller waits only for chunks
// in progress. Workers spin briefly after a job (a decode step runs hundreds of loops, each tens of
// microseconds, back to back) and then sleep on a condition variable, so an idle pool costs no CPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 0: all hardware threads
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(chunk) for every chunk in [0, n_chunks), spread over the threads; returns when all are done.
  void run_chunks(int64_t n_chunks, const std::function<void(int64_t)>& fn);

  // Splits [0, n) into contiguous ranges (multiples of grain, a few per thread) and calls fn(begin, end).
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void work();  // takes chunks of the current job until none are left

  int n_threads_;
  std::vector<std::thread> workers_;
  // The current job. Written only while generation_ is odd and no worker is inside (see run_chunks).
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<int64_t> done_chunks_{0};
  std::atomic<uint64_t> generation_{0};  // even: a job is published; odd: the caller is preparing one
  std::atomic<int> inside_{0};           // workers between entering and leaving a job
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace ferry
