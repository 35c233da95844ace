// The CPU backend. Two kernel sets behind one interface:
//  - Reference: plain float loops (weights dequantized row by row, float accumulation in order). The oracle
//    every other kernel is tested against.
//  - Fast: activations quantized on the fly to the weight format's partner type, SIMD integer dot products
//    (run-time dispatch over SIMD levels), several tokens per weight-row pass, all threads; attention,
//    RMSNorm and SwiGLU through the SIMD kernels of vec_kernels.h.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_set>

#include "backends/cpu/quant_dot.h"
#include "backends/cpu/vec_kernels.h"
#include "core/thread_pool.h"
#include "ops/backend.h"
#include "sampling/sampler.h"

namespace ferry {

enum class CpuKernels { Reference, Fast };

struct CpuBackendOptions {
  CpuKernels kernels = CpuKernels::Fast;
  int n_threads = 0;                  // 0: all hardware threads
  SimdLevel simd = SimdLevel::Scalar;  // for Fast; callers pass detect_simd() or a forced level
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options);

  Device device() const override { return Device::Cpu; }
  std::string name() const override;
  // cpu.matmul: the kernels every matmul runs (prefill and decode alike): reference loops, or the fast kernels at
  // their SIMD level with the activation formats and the weights repacked for VNNI.
  std::vector<std::pair<std::string, std::string>> facts() const override;

  DeviceBuffer alloc(size_t bytes) override;
  Tensor prepare_weight(const Tensor& host, std::vector<DeviceBuffer>& keep) override;
  void copy_to_device(const Tensor& dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const Tensor& src, size_t bytes) override;
  void synchronize() override {}

  void embedding(const Tensor& out, const Tensor& table, const Tensor& ids) override;
  void rms_norm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps) override;
  void add_rms_norm(const Tensor& out, const Tensor& residual, const Tensor& delta, const Tensor& weight,
                    float eps) override;
  void matmul(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) override;
  void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, RopeOrdering ordering) override;
  void store_kv(const Tensor& k_cache, const Tensor& v_cache, const Tensor& k, const Tensor& v,
                const Tensor& slots) override;
  void attention(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                 const AttentionMeta& meta, float scale) override;
  void swiglu(const Tensor& out, const Tensor& gate, const Tensor& up) override;
  // Every optional op (elementwise_ops.cpp); sliding windows and soft-caps in both attention kernels (attention.cpp).
  bool supports(ModelFeature feature) const override;
  void geglu_tanh(const Tensor& out, const Tensor& gate, const Tensor& up) override;
  void softcap(const Tensor& x, float cap) override;
  void scale(const Tensor& x, float s, int64_t n_leading) override;
  // The fused projections' epilogues (fused_ops.cpp). wants_fused_projections() stays false on the CPU (its
  // matmuls gain nothing from fusion and its RSS is measured); they serve as the oracle of the GPU kernels and
  // run when a test forces fusion.
  void qkv_epilogue(const QkvEpilogueArgs& a) override;
  void swiglu_fused(const Tensor& out, const Tensor& gate_up) override;
  void gather_rows(const Tensor& out, const Tensor& x, const Tensor& rows) override;
  // Mixture-of-experts FFN (moe_ffn.cpp): plain loops per token (Reference), or tokens grouped by expert through the
  // fast matmul, each routed expert's weights read once per step (Fast).
  void moe_ffn(const MoeFfnArgs& a) override;
  // Sampling "on the device" is the reference Sampler per row, rows spread over the thread pool (sampling.cpp):
  // the serving engine then draws rows here, in parallel, as it does on a GPU.
  bool supports_sampling() const override { return true; }
  void sample(const Tensor& out, const Tensor& logits, std::span<const SamplingParams> params,
              std::span<const uint64_t> positions, std::span<const uint64_t> mask) override;
  void resolve_placeholders(const Tensor& ids, const Tensor& sampled) override;

  ThreadPool& pool() { return pool_; }

 private:
  void matmul_reference(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias);
  void matmul_fast(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias);
  // matmul_fast for a repacked Q4_1 weight: act = the quantized activations (n, act_row bytes).
  void matmul_q4_1x8(float* out, const uint8_t* act, size_t act_row, int64_t n, const Tensor& w);

  CpuBackendOptions options_;
  ThreadPool pool_;
  std::vector<std::unique_ptr<Sampler>> samplers_;  // sample(): one per row, reused
  DotKernels dot_;
  VecKernels vec_;
  // Data pointers of the weights (Q4_1, Q4_0) prepare_weight repacked to BlockQ4_1x8 (q4_1x8.h): matmul_fast and
  // embedding read those in the repacked layout. Only Fast kernels at the Avx512 level with VNNI repack.
  // Shared with the buffers' release functions, which remove their pointer when the weights are freed
  // (the memory may come back from the allocator later holding an ordinary tensor).
  struct RepackedSet {
    std::mutex mutex;
    std::unordered_set<const void*> ptrs;
    bool contains(const void* p) {
      std::lock_guard<std::mutex> lock(mutex);
      return ptrs.count(p) != 0;
    }
  };
  std::shared_ptr<RepackedSet> repacked_q4_1_ = std::make_shared<RepackedSet>();
  bool is_repacked(const Tensor& w) const {
    return (w.dtype == DType::Q4_1 || w.dtype == DType::Q4_0) && w.n_dims == 2 && repacked_q4_1_->contains(w.data);
  }
  std::vector<uint8_t> act_scratch_;  // quantized activations for matmul_fast: (n, row_bytes(act type, n_in))
  struct RopeTable {
    std::vector<int32_t> positions;  // [n] the positions the table was built for
    std::vector<float> inv_freq;     // [half] and the frequencies
    std::vector<float> cos_sin;      // [n][half][2]: cos, sin of positions[t] * inv_freq[i]
  };
  RopeTable rope_table_;  // rope's cache: q and k of every layer of a step share one table
  std::vector<float> moe_scratch_;  // moe_ffn (Fast): router logits, an expert's token block, gate, up, slot outputs
  std::vector<float> qkv_scratch_;  // qkv_epilogue: (n, 2, n_kv_heads, head_dim) f32 k and v when k_out/v_out are empty
};

}  // namespace ferry
