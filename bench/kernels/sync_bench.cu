// What a grid-wide wait costs on its own, for the decode kernels' design (docs/perf-log.md "## 2026-11-30: a decode layer's tail as one persistent kernel, and why it lost": every
// matvec launch and every grid barrier of the persistent decode-FFN kernel paid ~3-4 us; how much of that is the
// synchronization itself, and how much the slowest block's lateness?). Each figure is the median over 15
// replays of a CUDA graph, per synchronization, with every block holding a whole SM as the streamed matvecs do
// (grid = SM count, 9 warps, 120 KB of dynamic shared memory):
//  - kernel boundary, PDL: K empty kernels launched with programmatic stream serialization, each calling
//    griddepcontrol.launch_dependents then griddepcontrol.wait (the decode step's chain);
//  - kernel boundary, plain: the same without the attribute;
//  - grid barrier, fenced: one kernel doing K barriers of grid_barrier.cuh (bar.sync, thread 0's __threadfence +
//    atomicAdd, spin on ld.acquire, __threadfence, bar.sync), over the 8 "consumer" warps while warp 8 returns;
//  - grid barrier, release/acquire: the same with red.release.gpu for the arrival (no fence, no returned value;
//    the target comes from the count read at kernel start) and ld.acquire.gpu for the spin.
// Each is (time of K = 64) - (time of K = 0) over 64, so the launch of the graph itself cancels.
// Usage: sync_bench (no arguments).
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "backends/cuda/sm90/pdl.cuh"
#include "cuda_bench.h"
#include "dev/cuda/grid_barrier.cuh"

namespace {

using ferry::bench::median_ms;

constexpr int kThreads = 9 * 32;          // 8 consumer warps + 1, as the streamed matvecs
constexpr int kConsumers = 8 * 32;
constexpr size_t kSmem = 120 * 1024;      // more than half an SM: one block per SM
constexpr int kSyncs = 64;

__global__ void __launch_bounds__(kThreads, 1) empty_pdl_kernel() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  extern __shared__ unsigned char smem[];
  if (threadIdx.x == 0) smem[0] = 1;  // keeps the dynamic shared memory in use
}

__global__ void __launch_bounds__(kThreads, 1) fenced_barriers_kernel(unsigned long long* counter, int n) {
  if (threadIdx.x >= kConsumers) return;  // the "producer" warp does not take part, as in decode_ffn
  for (int i = 0; i < n; ++i) ferry::cuda_ops::grid_barrier<1, kConsumers>(counter);
}

__device__ __forceinline__ void red_release_add(unsigned long long* p, unsigned long long v) {
  asm volatile("red.release.gpu.global.add.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}

__global__ void __launch_bounds__(kThreads, 1) release_barriers_kernel(unsigned long long* counter, int n) {
  if (threadIdx.x >= kConsumers) return;
  __shared__ unsigned long long base;
  // Every earlier launch has finished its barriers (stream order), and no block of this one can have passed its
  // first barrier before this block arrives: the count rounded down to the grid is this launch's start.
  if (threadIdx.x == 0) base = ferry::cuda_ops::ld_acquire_gpu(counter) / gridDim.x * gridDim.x;
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
  for (int i = 0; i < n; ++i) {
    asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
    if (threadIdx.x == 0) {
      red_release_add(counter, 1ull);
      const unsigned long long target = base + (unsigned long long)(i + 1) * gridDim.x;
      while (ferry::cuda_ops::ld_acquire_gpu(counter) < target) {
      }
    }
    asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
  }
}

// A graph of `kernels` launches of `body` (each one call of launch(stream)) on stream s; replayed by the caller.
template <class F>
cudaGraphExec_t capture(cudaStream_t s, int kernels, F&& launch) {
  cudaGraph_t g = nullptr;
  BENCH_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kernels; ++i) launch(s);
  BENCH_CUDA_CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t e = nullptr;
  BENCH_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
  BENCH_CUDA_CHECK(cudaGraphDestroy(g));
  return e;
}

double replay_us(cudaStream_t s, cudaGraphExec_t e) {
  const double ms = median_ms(s, [&] { BENCH_CUDA_CHECK(cudaGraphLaunch(e, s)); }, 15, 1, 3);
  BENCH_CUDA_CHECK(cudaGraphExecDestroy(e));
  return ms * 1e3;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  if (!ferry::bench::report_device(prop)) return 1;
  const int grid = prop.multiProcessorCount;
  cudaStream_t s = nullptr;
  BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (const void* k : {reinterpret_cast<const void*>(empty_pdl_kernel),
                        reinterpret_cast<const void*>(fenced_barriers_kernel),
                        reinterpret_cast<const void*>(release_barriers_kernel)})
    BENCH_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  unsigned long long* counter = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&counter, sizeof(unsigned long long)));
  BENCH_CUDA_CHECK(cudaMemset(counter, 0, sizeof(unsigned long long)));

  const auto empty_launch = [&](bool pdl) {
    return [&, pdl](cudaStream_t st) {
      if (pdl) {
        ferry::cuda_ops::launch_pdl(empty_pdl_kernel, dim3(unsigned(grid)), dim3(kThreads), kSmem, st);
      } else {
        empty_pdl_kernel<<<grid, kThreads, kSmem, st>>>();
        BENCH_CUDA_CHECK(cudaGetLastError());
      }
    };
  };
  const auto per_sync = [&](auto&& make_graph) {
    const double t0 = replay_us(s, make_graph(0)), t1 = replay_us(s, make_graph(kSyncs));
    return (t1 - t0) / kSyncs;
  };
  // Kernel boundaries: K + 1 kernels against 1 kernel.
  const double pdl = per_sync([&](int k) { return capture(s, k + 1, empty_launch(true)); });
  const double plain = per_sync([&](int k) { return capture(s, k + 1, empty_launch(false)); });
  const auto barrier_graph = [&](auto kernel) {
    return [&, kernel](int k) {
      return capture(s, 1, [&, kernel, k](cudaStream_t st) {
        kernel<<<grid, kThreads, kSmem, st>>>(counter, k);
        BENCH_CUDA_CHECK(cudaGetLastError());
      });
    };
  };
  const double fenced = per_sync(barrier_graph(fenced_barriers_kernel));
  const double release = per_sync(barrier_graph(release_barriers_kernel));
  std::printf("%d blocks x %d threads, %zu KB shared memory each (one per SM), %d synchronizations, graph-replayed\n",
              grid, kThreads, kSmem / 1024, kSyncs);
  std::printf("| synchronization | us each |\n|---|---|\n");
  std::printf("| kernel boundary, PDL (launch_dependents + wait) | %.2f |\n", pdl);
  std::printf("| kernel boundary, plain | %.2f |\n", plain);
  std::printf("| grid barrier, fenced (grid_barrier.cuh) | %.2f |\n", fenced);
  std::printf("| grid barrier, red.release / ld.acquire | %.2f |\n", release);
  BENCH_CUDA_CHECK(cudaFree(counter));
  BENCH_CUDA_CHECK(cudaStreamDestroy(s));
  return 0;
}
