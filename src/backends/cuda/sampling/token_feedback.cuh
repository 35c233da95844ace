// Token feedback for asynchronous scheduling: a step is enqueued before the previous step's sampled ids reach the
// host, so its input ids hold placeholders (-(row + 1): "the token the previous step sampled in row `row`") that
// this kernel replaces, on the device, just before the embedding reads them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/common/device_errors.h"

namespace ferry::cuda_ops {

struct PlaceholderParams {
  int32_t* ids;            // (n) i32 device, rewritten in place: id < 0 -> sampled[-id - 1] (0 where that is -1)
  const int32_t* sampled;  // (n_sampled) i32 device: the previous step's sample() output
  int64_t n;
  int64_t n_sampled;       // a placeholder naming a row >= n_sampled sets kBadTokenId and stays negative
  DeviceErrors* errors;
};

// One thread per id; a plain launch (the embedding after it waits for it through PDL).
void resolve_placeholders(const PlaceholderParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
