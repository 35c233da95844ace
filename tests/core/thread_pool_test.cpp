// ThreadPool: every chunk runs exactly once, parallel_for covers [0, n) without overlap, back-to-back jobs
// (a decode step's hundreds of small loops) all complete, sleeping workers wake for a new job, and more
// threads than cores (waiters yield) still finish.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace ferry {
namespace {

void expect_each_chunk_once(ThreadPool& pool, int64_t n_chunks) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n_chunks > 0 ? n_chunks : 0));
  pool.run_chunks(n_chunks, [&](int64_t c) { hits[size_t(c)].fetch_add(1); });
  for (int64_t c = 0; c < n_chunks; ++c) EXPECT_EQ(hits[size_t(c)].load(), 1) << "chunk " << c << " of " << n_chunks;
}

TEST(ThreadPool, EveryChunkOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000}) expect_each_chunk_once(pool, n);
  }
}

TEST(ThreadPool, ParallelForCoversRangeWithoutOverlap) {
  ThreadPool pool(3);
  for (int64_t n : {1, 5, 16, 17, 100, 4097}) {
    for (int64_t grain : {1, 4, 16}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
        EXPECT_TRUE(b < e && e <= n);
        EXPECT_TRUE(b % grain == 0) << "range start " << b << " not a multiple of grain " << grain;
        for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "n " << n << " grain " << grain;
    }
  }
}

TEST(ThreadPool, BackToBackJobsAndWakeAfterSleep) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int job = 0; job < 5000; ++job) pool.run_chunks(4, [&](int64_t c) { sum.fetch_add(c + 1); });
  EXPECT_EQ(sum.load(), 5000 * 10);
  // longer than the spin: the worker sleeps on the condition variable and must wake for the next job
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::atomic<int> ran_elsewhere{0};
  const auto caller = std::this_thread::get_id();
  for (int job = 0; job < 50 && ran_elsewhere.load() == 0; ++job) {
    pool.run_chunks(64, [&](int64_t) {
      if (std::this_thread::get_id() != caller) ran_elsewhere.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
  }
  EXPECT_GT(ran_elsewhere.load(), 0) << "the sleeping worker never took a chunk";
}

TEST(ThreadPool, MoreThreadsThanCoresFinish) {
  const int threads = int(std::thread::hardware_concurrency()) * 3 + 1;
  ThreadPool pool(threads);
  std::atomic<int64_t> sum{0};
  for (int job = 0; job < 300; ++job)
    pool.run_chunks(threads * 2, [&](int64_t c) {
      volatile int64_t spin = 0;
      for (int i = 0; i < 2000; ++i) spin = spin + i;
      sum.fetch_add(c);
    });
  const int64_t n = threads * 2;
  EXPECT_EQ(sum.load(), 300 * n * (n - 1) / 2);
}

}  // namespace
}  // namespace ferry
