// Backend::moe_ffn's default: the op composed from matmul, gather_rows and swiglu, routing and the weighted sum on
// the host. A backend with its own kernels overrides it (the CPU backend: backends/cpu/moe_ffn.cpp).
#include <algorithm>
#include <vector>

#include "ops/backend.h"

namespace ferry {

void check_moe_ffn_args(const MoeFfnArgs& a) {
  const int64_t n = a.x.rows(), dim = a.x.cols();
  const int E = int(a.router.rows());
  FERRY_CHECK(a.x.dtype == DType::F32 && a.out.dtype == DType::F32 && a.out.rows() == n && a.out.cols() == dim &&
                  a.router.n_dims == 2 && a.router.cols() == dim,
              "moe_ffn: x {}, out {}, router {}", a.x.shape_str(), a.out.shape_str(), a.router.shape_str());
  const int El = int(a.gate_exps.size());
  FERRY_CHECK(E > 0 && El > 0 && a.up_exps.size() == a.gate_exps.size() && a.down_exps.size() == a.gate_exps.size(),
              "moe_ffn: {} gate, {} up and {} down experts for a router of {}", a.gate_exps.size(), a.up_exps.size(),
              a.down_exps.size(), E);
  FERRY_CHECK(a.expert_begin >= 0 && a.expert_begin + El <= E,
              "moe_ffn: experts {}..{} held, outside the router's {}", a.expert_begin, a.expert_begin + El - 1, E);
  FERRY_CHECK(a.top_k >= 1 && a.top_k <= E, "moe_ffn: top-{} of {} experts", a.top_k, E);
  const int64_t H = a.gate_exps[0].rows();
  for (int e = 0; e < El; ++e) {
    const Tensor &g = a.gate_exps[size_t(e)], &u = a.up_exps[size_t(e)], &d = a.down_exps[size_t(e)];
    FERRY_CHECK(g.rows() == H && g.cols() == dim && u.rows() == H && u.cols() == dim && d.rows() == dim && d.cols() == H,
                "moe_ffn: expert {} has gate {}, up {}, down {} for dim {} and {} hidden units", e, g.shape_str(),
                u.shape_str(), d.shape_str(), dim, H);
  }
}

void Backend::moe_ffn(const MoeFfnArgs& a) {
  check_moe_ffn_args(a);
  const int64_t n = a.x.rows(), dim = a.x.cols();
  const int E = int(a.router.rows());
  if (n == 0) return;
  const int64_t H = a.gate_exps[0].rows();
  // router logits: (n, E) f32, to the host
  DeviceBuffer logits_buf = alloc(size_t(n) * size_t(E) * 4);
  const Tensor logits = logits_buf.view(DType::F32, {n, int64_t(E)});
  matmul(logits, a.x, a.router, Tensor{});
  std::vector<float> host_logits(size_t(n) * size_t(E));
  copy_to_host(host_logits.data(), logits, host_logits.size() * 4);
  const MoeRoutes r = route_moe(host_logits.data(), n, E, a.top_k, a.norm);

  // Per routed local expert: its tokens gathered (cnt, dim), gate and up (cnt, H), SwiGLU, down (cnt, dim) to the host.
  const int El = int(a.gate_exps.size()), e0 = a.expert_begin;
  const int64_t cap = n;  // an expert takes each token at most once
  DeviceBuffer rows_buf = alloc(size_t(cap) * 4), xe_buf = alloc(size_t(cap * dim) * 4);
  DeviceBuffer g_buf = alloc(size_t(cap * H) * 4), u_buf = alloc(size_t(cap * H) * 4), y_buf = alloc(size_t(cap * dim) * 4);
  std::vector<float> out_host(size_t(n * dim), 0.0f), y_host(size_t(cap * dim));
  std::vector<float> per_slot(size_t(n) * size_t(a.top_k) * size_t(dim));  // (n, k, dim): each slot's expert output
  std::vector<int32_t> rows(static_cast<size_t>(cap));
  for (int le = 0; le < El; ++le) {
    const int e = e0 + le;  // the global index (routes), le the local one (weights)
    const int64_t cnt = r.count(e);
    if (cnt == 0) continue;
    for (int64_t i = 0; i < cnt; ++i) rows[size_t(i)] = r.slots[size_t(r.offsets[size_t(e)] + i)] / a.top_k;
    const Tensor rows_t = rows_buf.view(DType::I32, {cnt});
    copy_to_device(rows_t, rows.data(), size_t(cnt) * 4);
    const Tensor xe = xe_buf.view(DType::F32, {cnt, dim});  // (cnt, dim): the expert's tokens
    gather_rows(xe, a.x, rows_t);
    const Tensor g = g_buf.view(DType::F32, {cnt, H}), u = u_buf.view(DType::F32, {cnt, H});
    matmul(g, xe, a.gate_exps[size_t(le)], Tensor{});
    matmul(u, xe, a.up_exps[size_t(le)], Tensor{});
    swiglu(g, g, u);
    const Tensor y = y_buf.view(DType::F32, {cnt, dim});
    matmul(y, g, a.down_exps[size_t(le)], Tensor{});
    synchronize();
    copy_to_host(y_host.data(), y, size_t(cnt * dim) * 4);
    for (int64_t i = 0; i < cnt; ++i) {
      const int32_t s = r.slots[size_t(r.offsets[size_t(e)] + i)];
      std::copy_n(y_host.data() + i * dim, dim, per_slot.data() + size_t(s) * size_t(dim));
    }
  }
  // out[t] = sum over slots in order (most probable first) of weight * expert output; other ranks' experts add nothing
  for (int64_t t = 0; t < n; ++t)
    for (int j = 0; j < a.top_k; ++j) {
      const size_t s = size_t(t) * size_t(a.top_k) + size_t(j);
      if (r.expert[s] < e0 || r.expert[s] >= e0 + El) continue;
      const float w = r.weight[s];
      for (int64_t d = 0; d < dim; ++d) out_host[size_t(t * dim + d)] += w * per_slot[s * size_t(dim) + size_t(d)];
    }
  copy_to_device(a.out, out_host.data(), out_host.size() * 4);
  synchronize();
}

}  // namespace ferry
