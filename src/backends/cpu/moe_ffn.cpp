// CpuBackend::moe_ffn: the mixture-of-experts FFN on the CPU.
//  - Reference (the oracle): per token, plain loops: router logits by dot_ref, route_moe, then for each chosen
//    expert gate/up rows by dot_ref, SwiGLU, the down rows, accumulated in slot order (most probable first).
//  - Fast: router logits by the fast matmul, route_moe, the step's (token, slot) pairs grouped by expert; each
//    routed expert's tokens gathered into one block and run through the fast matmul (activations quantized once per
//    block, all threads over the weight rows), so every routed expert's weights are read once per step for all of
//    its tokens and experts nobody chose are not read at all; then the weighted sum per token in slot order.
// Expert parallelism: only the local experts [expert_begin, expert_begin + El) run; a slot routed elsewhere adds
// nothing here (the rank holding its expert adds it; the model sums the ranks' outputs).
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/quant_dot.h"

namespace ferry {

void CpuBackend::moe_ffn(const MoeFfnArgs& a) {
  check_moe_ffn_args(a);
  const int64_t n = a.x.rows(), dim = a.x.cols();
  const int E = int(a.router.rows());
  const int64_t H = a.gate_exps[0].rows();
  if (n == 0) return;
  const size_t k = size_t(a.top_k);
  const int El = int(a.gate_exps.size()), e0 = a.expert_begin;
  const auto local = [&](int32_t e) { return e >= e0 && e < e0 + El; };

  if (options_.kernels == CpuKernels::Reference) {
    std::vector<float> logits(size_t(n) * size_t(E));
    pool_.parallel_for(n, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int e = 0; e < E; ++e)
          logits[size_t(t) * size_t(E) + size_t(e)] = dot_ref(a.router.dtype, a.router.row(e), a.x.row<float>(t), dim);
    });
    const MoeRoutes r = route_moe(logits.data(), n, E, a.top_k, a.norm);
    pool_.parallel_for(n, 1, [&](int64_t t0, int64_t t1) {
      std::vector<float> h(static_cast<size_t>(H));
      for (int64_t t = t0; t < t1; ++t) {
        const float* x = a.x.row<float>(t);
        float* o = a.out.row<float>(t);
        std::fill(o, o + dim, 0.0f);
        for (size_t j = 0; j < k; ++j) {
          if (!local(r.expert[size_t(t) * k + j])) continue;
          const size_t e = size_t(r.expert[size_t(t) * k + j] - e0);  // the local index
          const float w = r.weight[size_t(t) * k + j];
          const Tensor &g = a.gate_exps[e], &u = a.up_exps[e], &d = a.down_exps[e];
          for (int64_t i = 0; i < H; ++i) {
            const float gv = dot_ref(g.dtype, g.row(i), x, dim), uv = dot_ref(u.dtype, u.row(i), x, dim);
            h[size_t(i)] = gv / (1.0f + std::exp(-gv)) * uv;
          }
          for (int64_t i = 0; i < dim; ++i) o[i] += w * dot_ref(d.dtype, d.row(i), h.data(), H);
        }
      }
    });
    return;
  }

  // Fast. Scratch (moe_scratch_): logits (n, E), then per expert block xe (cnt, dim), gate (cnt, H), up (cnt, H);
  // ys (n*k, dim): each slot's expert output.
  const size_t need = size_t(n) * size_t(E) + size_t(n) * size_t(dim + 2 * H) + size_t(n) * k * size_t(dim);
  if (moe_scratch_.size() < need) moe_scratch_.resize(need);
  float* logits = moe_scratch_.data();
  float* xe = logits + size_t(n) * size_t(E);
  float* gate = xe + size_t(n) * size_t(dim);
  float* up = gate + size_t(n) * size_t(H);
  float* ys = up + size_t(n) * size_t(H);
  matmul_fast(Tensor::make(DType::F32, {n, int64_t(E)}, logits), a.x, a.router, Tensor{});
  const MoeRoutes r = route_moe(logits, n, E, a.top_k, a.norm);
  for (int le = 0; le < El; ++le) {
    const int e = e0 + le;  // the global index (routes), le the local one (weights)
    const int64_t cnt = r.count(e);
    if (cnt == 0) continue;
    const int32_t* slots = r.slots.data() + r.offsets[size_t(e)];
    for (int64_t i = 0; i < cnt; ++i)
      std::memcpy(xe + i * dim, a.x.row<float>(slots[i] / a.top_k), size_t(dim) * 4);
    const Tensor xt = Tensor::make(DType::F32, {cnt, dim}, xe);
    const Tensor gt = Tensor::make(DType::F32, {cnt, H}, gate), ut = Tensor::make(DType::F32, {cnt, H}, up);
    matmul_fast(gt, xt, a.gate_exps[size_t(le)], Tensor{});
    matmul_fast(ut, xt, a.up_exps[size_t(le)], Tensor{});
    pool_.parallel_for(cnt * H, 4096, [&](int64_t i0, int64_t i1) { vec_.swiglu(gate + i0, gate + i0, up + i0, i1 - i0); });
    // down into xe's rows (cnt, dim), then each row to its slot
    const Tensor yt = Tensor::make(DType::F32, {cnt, dim}, xe);
    matmul_fast(yt, gt, a.down_exps[size_t(le)], Tensor{});
    for (int64_t i = 0; i < cnt; ++i) std::memcpy(ys + size_t(slots[i]) * size_t(dim), xe + i * dim, size_t(dim) * 4);
  }
  pool_.parallel_for(n, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* o = a.out.row<float>(t);
      std::fill(o, o + dim, 0.0f);
      for (size_t j = 0; j < k; ++j) {
        if (!local(r.expert[size_t(t) * k + j])) continue;
        const float w = r.weight[size_t(t) * k + j];
        const float* y = ys + (size_t(t) * k + j) * size_t(dim);
        for (int64_t i = 0; i < dim; ++i) o[i] += w * y[i];
      }
    }
  });
}

}  // namespace ferry
