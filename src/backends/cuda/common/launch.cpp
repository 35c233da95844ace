#include "backends/cuda/common/launch.cuh"

#include "core/check.h"

namespace ferry::cuda_ops {

void cuda_fail(cudaError_t err, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();  // clear a sticky-free error so the next call does not report it again
  fail("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(err), cudaGetErrorString(err), expr, file, line);
}

void precondition_fail(const char* cond, const char* file, int line) {
  fail("internal error: CUDA launcher precondition {} failed ({}:{})", cond, file, line);
}

}  // namespace ferry::cuda_ops
