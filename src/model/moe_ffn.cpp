#include "model/moe_ffn.h"

namespace ferry {

void run_moe_ffn(Backend& backend, Communicator& comm, const ModelConfig& c, const LayerWeights& L,
                 const Tensor& ffn_in, const Tensor& next_in, const Tensor& residual, const Tensor& delta,
                 const Tensor& next_norm) {
  backend.moe_ffn({.out = delta, .x = ffn_in, .router = L.ffn_gate_inp, .gate_exps = L.ffn_gate_exps,
                   .up_exps = L.ffn_up_exps, .down_exps = L.ffn_down_exps, .top_k = c.n_experts_used,
                   .norm = c.moe_norm, .expert_begin = c.expert_begin});
  comm.all_reduce_sum(delta);
  if (!next_norm.empty()) backend.add_rms_norm(next_in, residual, delta, next_norm, c.rms_eps);
}

}  // namespace ferry
