// Test only: the CPU backend with fused projections forced on (wants_fused_projections() = true), every op
// forwarded to a CpuBackend. The CPU backend itself stays unfused; this lets the model's fused path (wqkv,
// w_gate_up, qkv_epilogue, swiglu_fused) run and be compared with the unfused one on the CPU.
#pragma once

#include <memory>
#include <string>

#include "backends/cpu/cpu_backend.h"

namespace ferry::test {

class FusingCpuBackend final : public Backend {
 public:
  explicit FusingCpuBackend(const CpuBackendOptions& o) : cpu_(o) {}

  bool wants_fused_projections() const override { return true; }

  Device device() const override { return cpu_.device(); }
  std::string name() const override { return cpu_.name() + "+fused"; }
  DeviceBuffer alloc(size_t bytes) override { return cpu_.alloc(bytes); }
  DType kv_dtype() const override { return cpu_.kv_dtype(); }
  Tensor prepare_weight(const Tensor& host, std::vector<DeviceBuffer>& keep) override {
    return cpu_.prepare_weight(host, keep);
  }
  void copy_to_device(const Tensor& dst, const void* src, size_t bytes) override { cpu_.copy_to_device(dst, src, bytes); }
  void copy_to_host(void* dst, const Tensor& src, size_t bytes) override { cpu_.copy_to_host(dst, src, bytes); }
  void synchronize() override { cpu_.synchronize(); }

  void embedding(const Tensor& out, const Tensor& table, const Tensor& ids) override { cpu_.embedding(out, table, ids); }
  void rms_norm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps) override {
    cpu_.rms_norm(out, x, weight, eps);
  }
  void add_rms_norm(const Tensor& out, const Tensor& residual, const Tensor& delta, const Tensor& weight,
                    float eps) override {
    cpu_.add_rms_norm(out, residual, delta, weight, eps);
  }
  void matmul(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) override {
    cpu_.matmul(out, x, w, bias);
  }
  void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, RopeOrdering ordering) override {
    cpu_.rope(x, positions, inv_freq, ordering);
  }
  void store_kv(const Tensor& k_cache, const Tensor& v_cache, const Tensor& k, const Tensor& v,
                const Tensor& slots) override {
    cpu_.store_kv(k_cache, v_cache, k, v, slots);
  }
  void attention(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                 const AttentionMeta& meta, float scale) override {
    cpu_.attention(out, q, k_cache, v_cache, meta, scale);
  }
  void swiglu(const Tensor& out, const Tensor& gate, const Tensor& up) override { cpu_.swiglu(out, gate, up); }
  void gather_rows(const Tensor& out, const Tensor& x, const Tensor& rows) override { cpu_.gather_rows(out, x, rows); }
  void qkv_epilogue(const QkvEpilogueArgs& a) override { cpu_.qkv_epilogue(a); }
  void swiglu_fused(const Tensor& out, const Tensor& gate_up) override { cpu_.swiglu_fused(out, gate_up); }

 private:
  CpuBackend cpu_;
};

}  // namespace ferry::test
