#ifdef FERRY_HAS_NCCL

#include "parallel/step_collectives.h"

#include <cuda_runtime.h>

#include "core/check.h"

namespace ferry {
namespace {

void check(cudaError_t e, const char* what) {
  FERRY_CHECK(e == cudaSuccess, "timing the tensor-parallel collectives: {} failed: {}", what, cudaGetErrorString(e));
}

}  // namespace

StepCollectives time_step_collectives(Communicator& comm, CUstream_st* stream, int n_layers, int64_t dim,
                                      int64_t gather_rows, int replays) {
  StepCollectives r;
  r.all_reduces = 2 * n_layers + 1;
  r.all_reduce_bytes = dim * 4;
  r.gather_bytes = gather_rows * 4;
  float* x = nullptr;       // (dim) f32: one token's hidden state
  float* logits = nullptr;  // (gather_rows) f32: every rank's vocabulary part
  check(cudaMalloc(&x, size_t(dim) * 4), "cudaMalloc");
  check(cudaMalloc(&logits, size_t(gather_rows) * 4), "cudaMalloc");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  try {
    check(cudaMemsetAsync(x, 0, size_t(dim) * 4, stream), "cudaMemsetAsync");
    check(cudaMemsetAsync(logits, 0, size_t(gather_rows) * 4, stream), "cudaMemsetAsync");
    const Tensor xt = Tensor::make(DType::F32, {dim}, x, Device::Cuda);
    const Tensor lt = Tensor::make(DType::F32, {gather_rows}, logits, Device::Cuda);
    const auto step = [&] {
      for (int i = 0; i < r.all_reduces; ++i) comm.all_reduce_sum(xt);
      comm.all_gather_inplace(lt);
    };
    step();  // eager first: connections are made outside the capture
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    step();
    check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    for (int i = 0; i < 3; ++i) check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int i = 0; i < replays; ++i) check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    r.us_per_step = 1000.0 * double(ms) / replays;
  } catch (...) {
    cudaStreamSynchronize(stream);
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    cudaFree(x);
    cudaFree(logits);
    throw;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(x);
  cudaFree(logits);
  return r;
}

}  // namespace ferry

#endif  // FERRY_HAS_NCCL
