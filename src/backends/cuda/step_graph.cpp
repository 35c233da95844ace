#include "backends/cuda/step_graph.h"

#include <cuda_runtime.h>

namespace ferry::cuda_ops {

CudaStepGraph::~CudaStepGraph() {
  if (exec_) (void)cudaGraphExecDestroy(exec_);  // a destructor must not throw
}

}  // namespace ferry::cuda_ops
