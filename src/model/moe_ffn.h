// The FFN of a mixture-of-experts layer in the forward pass: one Backend::moe_ffn (routing, the routed experts,
// the weighted sum: how it is fused is the backend's business), then the residual add and the next norm.
#pragma once

#include "model/config.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "ops/communicator.h"

namespace ferry {

// ffn_in: (n, dim) f32, the normed FFN input; next_in: (n, dim), the next layer's normed input (f32 or the backend's
// matmul input dtype) <- rms_norm(residual) * next_norm; residual: (n, dim) f32, += the experts' output; delta:
// (n, dim) f32, the experts' output (summed over comm: this rank computed its part of each expert under --tp, its
// own experts c.expert_begin .. + c.local_experts() under --ep); next_norm: (dim) f32, the next layer's attention norm, or empty for the last
// layer (delta is then only summed over ranks).
void run_moe_ffn(Backend& backend, Communicator& comm, const ModelConfig& c, const LayerWeights& L,
                 const Tensor& ffn_in, const Tensor& next_in, const Tensor& residual, const Tensor& delta,
                 const Tensor& next_norm);

}  // namespace ferry
