// Test only: the CPU backend with fused projections forced on (wants_fused_projections() = true), every op
// forwarded to a CpuBackend. The CPU backend itself stays unfused; this lets the model's fused path (wqkv,
// w_gate_up, qkv_epilogue, swiglu_fused) run and be compared with the unfused one on the CPU.
#pragma once

#include <string>

#include "fixtures/forwarding_backend.h"

namespace ferry::test {

class FusingCpuBackend final : public ForwardingCpuBackend {
 public:
  // defer_norms: every layer tail given next_w leaves its next norm to that projection (as CUDA does at one token):
  // out then holds another norm (the FFN's, the composition's only way to add the down projection here) and the
  // next rms_norm_matmul must compute its own; the two counters show that path ran.
  explicit FusingCpuBackend(const CpuBackendOptions& o, bool defer_norms = false)
      : ForwardingCpuBackend(o), defer_norms_(defer_norms) {}
  bool wants_fused_projections() const override { return true; }
  std::string name() const override { return cpu_.name() + "+fused"; }
  void rms_norm_matmul(const Tensor& out, const Tensor& normed, const Tensor& x, const Tensor& norm_weight, float eps,
                       const Tensor& w, const Tensor& bias) override {
    ++norm_matmuls;
    Backend::rms_norm_matmul(out, normed, x, norm_weight, eps, w, bias);
  }
  void attn_out_ffn(const AttnOutFfn& a) override {
    if (!defer_norms_ || a.next_w.empty()) {
      Backend::attn_out_ffn(a);
      return;
    }
    ++tails_without_norm;
    AttnOutFfn wrong_norm = a;
    wrong_norm.next_norm = a.ffn_norm;
    wrong_norm.next_w = Tensor{};
    Backend::attn_out_ffn(wrong_norm);
    forget_written_norm();
  }
  int norm_matmuls = 0, tails_without_norm = 0;

 private:
  bool defer_norms_;
};

}  // namespace ferry::test
