// Test only: the CPU backend with fused projections forced on (wants_fused_projections() = true), every op
// forwarded to a CpuBackend. The CPU backend itself stays unfused; this lets the model's fused path (wqkv,
// w_gate_up, qkv_epilogue, swiglu_fused) run and be compared with the unfused one on the CPU.
#pragma once

#include <string>

#include "fixtures/forwarding_backend.h"

namespace ferry::test {

class FusingCpuBackend final : public ForwardingCpuBackend {
 public:
  // norm_in_matmul: also claim Backend::norm_in_matmul at every step (as CUDA does at one token), so that the model
  // leaves each layer's attention norm to rms_norm_matmul and runs each layer's tail without next_norm (Backend's
  // compositions of both here); the two counters show that path ran.
  explicit FusingCpuBackend(const CpuBackendOptions& o, bool norm_in_matmul = false)
      : ForwardingCpuBackend(o), norm_in_matmul_(norm_in_matmul) {}
  bool wants_fused_projections() const override { return true; }
  std::string name() const override { return cpu_.name() + "+fused"; }
  bool norm_in_matmul(int64_t, const Tensor&) const override { return norm_in_matmul_; }
  void rms_norm_matmul(const Tensor& out, const Tensor& normed, const Tensor& x, const Tensor& norm_weight, float eps,
                       const Tensor& w, const Tensor& bias) override {
    ++norm_matmuls;
    Backend::rms_norm_matmul(out, normed, x, norm_weight, eps, w, bias);
  }
  void attn_out_ffn(const AttnOutFfn& a) override {
    if (a.next_norm.empty()) ++tails_without_norm;
    Backend::attn_out_ffn(a);
  }
  int norm_matmuls = 0, tails_without_norm = 0;

 private:
  bool norm_in_matmul_;
};

}  // namespace ferry::test
