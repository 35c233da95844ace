// A captured decode step on the CUDA backend: an instantiated CUDA graph (one cudaGraphLaunch per replay),
// and the backend's scratch epoch at capture time (a graph whose scratch buffers were reallocated since is
// stale and must not run).
#pragma once

#include <cstdint>

#include "ops/backend.h"

struct CUgraphExec_st;  // cudaGraphExec_t without the CUDA headers

namespace ferry::cuda_ops {

class CudaStepGraph final : public StepGraph {
 public:
  CudaStepGraph(CUgraphExec_st* exec, uint64_t epoch) : exec_(exec), epoch_(epoch) {}
  ~CudaStepGraph() override;
  CudaStepGraph(const CudaStepGraph&) = delete;
  CudaStepGraph& operator=(const CudaStepGraph&) = delete;

  CUgraphExec_st* exec() const { return exec_; }
  uint64_t epoch() const { return epoch_; }

 private:
  CUgraphExec_st* exec_;
  uint64_t epoch_;
};

}  // namespace ferry::cuda_ops
