// Test only: the CPU backend with fused projections forced on (wants_fused_projections() = true), every op
// forwarded to a CpuBackend. The CPU backend itself stays unfused; this lets the model's fused path (wqkv,
// w_gate_up, qkv_epilogue, swiglu_fused) run and be compared with the unfused one on the CPU.
#pragma once

#include <string>

#include "fixtures/forwarding_backend.h"

namespace ferry::test {

class FusingCpuBackend final : public ForwardingCpuBackend {
 public:
  explicit FusingCpuBackend(const CpuBackendOptions& o) : ForwardingCpuBackend(o) {}
  bool wants_fused_projections() const override { return true; }
  std::string name() const override { return cpu_.name() + "+fused"; }
};

}  // namespace ferry::test
