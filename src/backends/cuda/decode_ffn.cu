// The decode FFN kernel (design: decode_ffn.cuh): which weights it takes, and the launch.
#include "backends/cuda/decode_ffn.cuh"

#include "backends/cuda/common.cuh"
#include "backends/cuda/decode_ffn_plan.cuh"

namespace ferry::cuda_ops {

bool decode_ffn_supports(DType wtype, int64_t q_dim, int64_t dim, int64_t hidden, int n_sms, size_t max_smem) {
  if ((wtype != DType::Q8_0 && wtype != DType::Q4_0) || q_dim != dim || !ffn::shape_compiled(dim, hidden)) return false;
  // At least one row per block (version 10's row split), at most one per consumer thread (the block's residual
  // rows stay in its threads' registers from phase to phase).
  if (n_sms < 1 || dim < n_sms || hidden < n_sms || (dim + n_sms - 1) / n_sms > v7::kConsumerWarps * 32) return false;
  const ffn::Plan plan = ffn::make_plan(wtype, dim, hidden, n_sms);
  return plan.stages >= 2 && v7::one_block_per_sm(ffn::smem_bytes(plan)) <= max_smem;
}

bool decode_ffn_applies(DType wtype, int64_t q_dim, int64_t dim, int64_t hidden) {
  return decode_ffn_supports(wtype, q_dim, dim, hidden, v7::device_sm_count(), v7::device_max_smem());
}

void decode_ffn(DType wtype, const DecodeFfnParams& p, cudaStream_t stream) {
  const int n_sms = v7::device_sm_count();
  const int64_t dim = p.wo.rows, hidden = p.w_down.cols;
  FERRY_CUDA_REQUIRE(decode_ffn_supports(wtype, p.wo.cols, dim, hidden, n_sms, v7::device_max_smem()));
  FERRY_CUDA_REQUIRE(p.w_gate_up.rows == 2 * hidden && p.w_gate_up.cols == dim && p.w_down.rows == dim);
  for (const WeightView* w : {&p.wo, &p.w_gate_up, &p.w_down})
    FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(w->data) % 16 == 0 && w->scales % 16 == 0);
  for (const float* a : {p.attn, static_cast<const float*>(p.residual), p.ffn_norm, static_cast<const float*>(p.act)})
    FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a) % 16 == 0);
  FERRY_CUDA_REQUIRE(p.barrier != nullptr && p.out != nullptr && p.next_norm != nullptr);
  const ffn::Plan plan = ffn::make_plan(wtype, dim, hidden, n_sms);
  const size_t smem = v7::one_block_per_sm(ffn::smem_bytes(plan));
  (wtype == DType::Q8_0 ? ffn::launch_q8 : ffn::launch_q4)(p, plan, n_sms, smem, stream);
}

}  // namespace ferry::cuda_ops
