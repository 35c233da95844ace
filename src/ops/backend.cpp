// Backend's compositions of the fused layer ops from single ops (what a backend without its own fusion runs).
#include "ops/backend.h"

#include "ops/communicator.h"

namespace ferry {

std::string feature_name(ModelFeature f) {
  switch (f) {
    case ModelFeature::GeluTanhGlu: return "GeGLU (gelu tanh) op";
    case ModelFeature::SoftCap: return "soft-capping of attention scores and logits";
    case ModelFeature::SlidingWindow: return "sliding-window attention";
    case ModelFeature::Scale: return "scale op";
  }
  return "?";
}

void Backend::sublayer_end(const SublayerEnd& s) {
  FERRY_ASSERT(s.group != nullptr);
  matmul(s.delta, s.x, s.w, Tensor{});
  s.group->all_reduce_sum(s.delta);
  add_rms_norm(s.out, s.residual, s.delta, s.norm, s.eps);
  note_written_norm(s.out, s.residual, s.norm);
}

void Backend::rms_norm_matmul(const Tensor& out, const Tensor& normed, const Tensor& x, const Tensor& norm_weight,
                              float eps, const Tensor& w, const Tensor& bias) {
  if (!take_written_norm(normed, x, norm_weight)) rms_norm(normed, x, norm_weight, eps);
  matmul(out, normed, w, bias);
}

void Backend::attn_out_ffn(const AttnOutFfn& a) {
  sublayer_end({.out = a.ffn_in, .residual = a.residual, .delta = a.delta, .x = a.attn, .w = a.wo,
                .norm = a.ffn_norm, .eps = a.eps, .group = a.group});
  matmul_swiglu(a.act, a.gate_up, a.ffn_in, a.w_gate_up);
  sublayer_end({.out = a.out, .residual = a.residual, .delta = a.delta, .x = a.act, .w = a.w_down,
                .norm = a.next_norm, .next_w = a.next_w, .eps = a.eps, .group = a.group});
}

void Backend::note_written_norm(const Tensor& out, const Tensor& residual, const Tensor& norm) {
  written_norm_ = {.out = out.data, .residual = residual.data, .norm = norm.data, .rows = out.rows(),
                   .dtype = out.dtype};
}

bool Backend::take_written_norm(const Tensor& normed, const Tensor& x, const Tensor& norm_weight) {
  const WrittenNorm w = written_norm_;
  written_norm_ = {};
  return w.out != nullptr && w.out == normed.data && w.residual == x.data && w.norm == norm_weight.data &&
         w.rows == normed.rows() && w.dtype == normed.dtype;
}

}  // namespace ferry
