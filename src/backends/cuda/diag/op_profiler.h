// Per-op GPU times of the CUDA backend (FERRY_CUDA_PROFILE=1): every op the backend enqueues is bracketed by
// two CUDA events; after each stream synchronization the finished pairs are folded into per-key totals (key =
// op, path and shape, e.g. "matmul matvec bf16 14336x4096 n=1"). The report (at backend destruction, to
// stderr) lists each key's calls, total and mean time, share of the profiled GPU time, and the achieved
// bandwidth against the 4.30 TB/s copy roofline where the op states its bytes.
//
// Step graphs are off while profiling (events are per launch), so this measures op times, not the graph's
// launch gaps: compare the sum with a graph-replayed step's time (ferry bench without the variable) to see
// the gaps. An event pair times its op on the GPU even when the host launches slower than the GPU runs.
// Each op's host time (from the Scope's start to its end: argument checks, planning, launches) is summed too, so
// a step whose ops cost more on the host than on the GPU shows up (the "host us" column), and the GPU time from
// the previous profiled op's end to each op's start (the "gap us" column: the device idle, or running work no
// scope brackets, before the op; large before a step's first op, where it holds the host's time between steps).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ferry::cuda_ops {

class OpProfiler {
 public:
  explicit OpProfiler(cudaStream_t stream) : stream_(stream) {}
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // Brackets the ops enqueued during its lifetime.
  class Scope {
   public:
    Scope(OpProfiler* p, std::string key, double bytes);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpProfiler* p_;
    std::string key_;
    double bytes_ = 0;
    cudaEvent_t start_ = nullptr;
    std::chrono::steady_clock::time_point host_start_;
  };

  // Folds every finished pair into the totals (call after the stream was synchronized).
  void collect();
  // The table (empty when nothing was profiled).
  std::string report();

 private:
  struct Pending {
    std::string key;
    double bytes;
    cudaEvent_t start, stop;
    double host_ms;
  };
  struct Totals {
    int64_t calls = 0, gaps = 0;
    double ms = 0, bytes = 0, host_ms = 0, gap_ms = 0;
  };
  cudaEvent_t take_event();

  cudaStream_t stream_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  cudaEvent_t last_stop_ = nullptr;  // the last folded op's stop event, kept for the next op's gap
  std::map<std::string, Totals> totals_;
};

}  // namespace ferry::cuda_ops
