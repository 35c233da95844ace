// The fused projections' epilogues on the CPU, written with the backend's own rms_norm, rope, store_kv and
// swiglu kernels, so a model run with fusion forced on computes the same bits as the unfused path (the test
// in tests/model checks it) and the GPU kernels have a reference.
#include <cstring>

#include "backends/cpu/cpu_backend.h"

namespace ferry {

void CpuBackend::qkv_epilogue(const QkvEpilogueArgs& a) {
  FERRY_ASSERT(a.qkv.n_dims == 3 && a.qkv.dtype == DType::F32 && a.q.n_dims == 3 && a.q.dtype == DType::F32);
  const int64_t n = a.qkv.shape[0], n_all = a.qkv.shape[1], D = a.qkv.shape[2];
  const int64_t H = a.q.shape[1], KVH = (n_all - H) / 2;
  FERRY_ASSERT(a.q.shape[0] == n && a.q.shape[2] == D && H + 2 * KVH == n_all && KVH > 0);
  FERRY_ASSERT(a.positions.numel() == n && a.slots.numel() == n);
  FERRY_ASSERT(a.q_norm.empty() == a.k_norm.empty());
  if (n == 0) return;
  // k and v of the step as (n, KVH, D) f32: the caller's k_out / v_out, else scratch.
  const size_t kv_floats = size_t(n * KVH * D);
  if ((a.k_out.empty() || a.v_out.empty()) && qkv_scratch_.size() < 2 * kv_floats) qkv_scratch_.resize(2 * kv_floats);
  const Tensor k = !a.k_out.empty() ? a.k_out : Tensor::make(DType::F32, {n, KVH, D}, qkv_scratch_.data());
  const Tensor v = !a.v_out.empty() ? a.v_out : Tensor::make(DType::F32, {n, KVH, D}, qkv_scratch_.data() + kv_floats);
  FERRY_ASSERT(k.numel() == int64_t(kv_floats) && v.numel() == int64_t(kv_floats));
  for (int64_t t = 0; t < n; ++t) {
    const float* src = a.qkv.ptr<float>() + t * n_all * D;
    std::memcpy(a.q.ptr<float>() + t * H * D, src, size_t(H * D) * 4);
    std::memcpy(k.ptr<float>() + t * KVH * D, src + H * D, size_t(KVH * D) * 4);
    std::memcpy(v.ptr<float>() + t * KVH * D, src + (H + KVH) * D, size_t(KVH * D) * 4);
  }
  if (!a.q_norm.empty()) {
    const Tensor qh = Tensor::make(DType::F32, {n * H, D}, a.q.data);  // one row per head
    const Tensor kh = Tensor::make(DType::F32, {n * KVH, D}, k.data);
    rms_norm(qh, qh, a.q_norm, a.eps);
    rms_norm(kh, kh, a.k_norm, a.eps);
  }
  rope(a.q, a.positions, a.inv_freq, a.ordering);
  rope(k, a.positions, a.inv_freq, a.ordering);
  store_kv(a.k_cache, a.v_cache, k, v, a.slots);
}

void CpuBackend::swiglu_fused(const Tensor& out, const Tensor& gate_up) {
  const int64_t n = gate_up.rows(), hidden = gate_up.cols() / 2;
  FERRY_ASSERT(gate_up.cols() == 2 * hidden && out.rows() == n && out.cols() == hidden);
  FERRY_ASSERT(out.dtype == DType::F32 && gate_up.dtype == DType::F32);
  // Row by row through swiglu (the same kernel as the unfused path): gate and up are the two halves of a row.
  for (int64_t t = 0; t < n; ++t) {
    const float* g = gate_up.row<float>(t);
    swiglu(Tensor::make(DType::F32, {1, hidden}, out.row<float>(t)), Tensor::make(DType::F32, {1, hidden}, const_cast<float*>(g)),
           Tensor::make(DType::F32, {1, hidden}, const_cast<float*>(g + hidden)));
  }
}

}  // namespace ferry
