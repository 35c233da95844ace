// CudaBackend::moe_ffn: the mixture-of-experts FFN on the device, every step value in device memory (a step graph
// holds it): router logits (moe_router_logits, f32 as the CPU reference computes them), softmax top-k
// (moe_route), the counting sort of the (token, slot) pairs by expert (moe_group) (the three in one launch,
// moe_route_decode, up to kMoeDecodeTokens tokens), then per projection one launch over the routed experts
// (moe_experts_matvec up to kMoeDecodeTokens tokens, moe_experts_gemm above): gate into h, up with SwiGLU over h
// in place (one launch for both in the matvec where gate and up share a type), down into y; then out = the
// routing-weighted sum of y in slot order (moe_combine). Experts nobody chose are not read.
// Tensor parallelism: each expert arrives as its rank's part (H = expert_hidden_dim / N rows of gate and up, columns
// of down), nothing here assumes the whole H. Expert parallelism (a rank's part of the experts) is refused.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cuda/common/device_errors.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_backend_views.h"
#include "backends/cuda/diag/op_profiler.h"
#include "backends/cuda/moe/moe_experts.cuh"
#include "backends/cuda/moe/moe_routing.cuh"
#include "core/check.h"

namespace ferry {

using namespace cuda_ops;

namespace {

// A decode step (moe_experts_use_matvec: up to kMoeDecodeTokens, moe_experts.cuh) routes in one launch
// (moe_route_decode) and runs the expert matvec; a larger step routes in three launches and runs the grouped GEMM.
static_assert(kMoeDecodeTokens <= kMoeRouteDecodeMaxTokens, "decode steps route in one launch");

constexpr size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// moe_scratch_'s regions for a step of n tokens (byte offsets, each 256-aligned).
struct MoeScratch {
  size_t done, logits, expert, weight, offsets, slots, active, counts, tile_expert, tile_begin, h, y, total;
};
MoeScratch moe_scratch_layout(int64_t n, int E, int k, int64_t H, int64_t dim, int64_t max_tiles) {
  const size_t ns = size_t(n) * size_t(k);
  MoeScratch s{};
  size_t at = 0;
  const auto take = [&](size_t bytes) {
    const size_t o = at;
    at += align256(bytes);
    return o;
  };
  s.done = take(4);                            // (1) u32: moe_route_decode's counter; first, so every n shares it
  s.logits = take(size_t(n) * size_t(E) * 4);  // (n, E) f32
  s.expert = take(ns * 4);                     // (n, k) i32
  s.weight = take(ns * 4);                     // (n, k) f32
  s.offsets = take((size_t(E) + 1) * 4);       // (E + 1) i32
  s.slots = take(ns * 4);                      // (n * k) i32
  s.active = take(size_t(E) * 4);              // (E) i32
  s.counts = take(2 * 4);                      // (2) i32
  s.tile_expert = take(size_t(max_tiles) * 4); // (max_tiles) i32
  s.tile_begin = take(size_t(max_tiles) * 4);  // (max_tiles) i32
  s.h = take(ns * size_t(H) * 4);              // (n * k, H) f32: gate, then SwiGLU, per slot
  s.y = take(ns * size_t(dim) * 4);            // (n * k, dim) f32: each slot's expert output
  s.total = at;
  return s;
}

// The (3, E) expert table of a layer as bytes: gate, up, down.
std::vector<uint8_t> expert_table_bytes(const MoeFfnArgs& a) {
  const size_t E = a.gate_exps.size();
  std::vector<MoeExpertWeight> t(3 * E);
  const std::span<const Tensor> proj[3] = {a.gate_exps, a.up_exps, a.down_exps};
  for (size_t p = 0; p < 3; ++p)
    for (size_t e = 0; e < E; ++e) {
      const WeightView v = weight_view(proj[p][e]);
      t[p * E + e] = {v.data, v.scales};
    }
  std::vector<uint8_t> bytes(t.size() * sizeof(MoeExpertWeight));
  std::memcpy(bytes.data(), t.data(), bytes.size());
  return bytes;
}

}  // namespace

const CudaBackend::MoeTable& CudaBackend::moe_table(const MoeFfnArgs& a) {
  std::vector<uint8_t> bytes = expert_table_bytes(a);
  MoeTable& t = moe_tables_[a.gate_exps[0].data];
  if (t.host == bytes) return t;
  FERRY_CHECK(!capturing_, "CUDA backend: moe_ffn's expert table must be built while capturing a step graph "
              "(run the step once without capture first)");
  ++scratch_epoch_;  // a graph that read the old table is stale
  t.device = alloc(bytes.size());
  t.host = std::move(bytes);
  copy_to_device(t.device.view(DType::I8, {int64_t(t.host.size())}), t.host.data(), t.host.size());
  return t;
}

void CudaBackend::moe_ffn(const MoeFfnArgs& a) {
  require_cuda(a.out, "moe_ffn output");
  require_cuda(a.x, "moe_ffn input");
  require_cuda(a.router, "moe_ffn router");
  check_moe_ffn_args(a);
  const int64_t n = a.x.rows(), dim = a.x.cols();
  const int E = int(a.router.rows());
  // Expert parallelism: the routing, grouping and expert kernels (backends/cuda/moe/) index one table of all E
  // experts; a rank's part of them (and routes to other ranks' experts counting zero) is not wired there yet.
  FERRY_CHECK(int(a.gate_exps.size()) == E,
              "CUDA moe_ffn: expert parallelism (this rank holds experts {}..{} of {}) runs on the CPU only for now; "
              "use --tp on the GPU", a.expert_begin, a.expert_begin + int(a.gate_exps.size()) - 1, E);
  FERRY_CHECK(E <= kMoeMaxExperts, "CUDA moe_ffn: {} experts (at most {})", E, kMoeMaxExperts);
  FERRY_CHECK(a.top_k <= kMoeMaxTopK, "CUDA moe_ffn: top-{} (at most {})", a.top_k, kMoeMaxTopK);
  const int64_t H = a.gate_exps[0].rows();
  const DType gate_t = a.gate_exps[0].dtype, up_t = a.up_exps[0].dtype, down_t = a.down_exps[0].dtype;
  for (int e = 0; e < E; ++e) {
    const Tensor &g = a.gate_exps[size_t(e)], &u = a.up_exps[size_t(e)], &d = a.down_exps[size_t(e)];
    FERRY_CHECK(g.dtype == gate_t && u.dtype == up_t && d.dtype == down_t,
                "CUDA moe_ffn: expert {} is {}/{}/{}, expert 0 {}/{}/{} (one type per projection)", e,
                dtype_name(g.dtype), dtype_name(u.dtype), dtype_name(d.dtype), dtype_name(gate_t), dtype_name(up_t),
                dtype_name(down_t));
    require_cuda(g, "moe_ffn gate expert");
    require_cuda(u, "moe_ffn up expert");
    require_cuda(d, "moe_ffn down expert");
  }
  FERRY_CHECK(dim % 4 == 0 && H % 4 == 0, "CUDA moe_ffn: dim {} and hidden {} must be multiples of 4", dim, H);
  FERRY_ASSERT(is_native_weight_type(a.router.dtype) && is_native_weight_type(gate_t) &&
               is_native_weight_type(up_t) && is_native_weight_type(down_t));
  if (n == 0) return;
  const int k = a.top_k;
  const int64_t n_slots = n * k;
  FERRY_CHECK(n_slots <= 0x7FFFFFFF && n <= 65535, "CUDA moe_ffn: a step of {} tokens is too large", n);
  const bool decode = moe_experts_use_matvec(n);  // routing in one launch, the experts as matvecs
  const int64_t max_tiles = moe_max_tiles(n_slots, E, kMoeGemmTileM);
  const int64_t max_groups = decode ? std::min<int64_t>(E, n_slots) : max_tiles;
  FERRY_CHECK(max_groups <= 65535, "CUDA moe_ffn: a step of {} tokens is too large", n);
  // the bytes of every expert the step can touch (at most min(E, n * k) of them), for the profile
  const double expert_bytes = double(a.gate_exps[0].nbytes() + a.up_exps[0].nbytes() + a.down_exps[0].nbytes());
  const OpProfiler::Scope prof(profiler_.get(), profiler_ ? fmt::format("moe_ffn n={}", token_bucket(n)) : std::string(),
                               expert_bytes * double(std::min<int64_t>(E, n_slots)));
  const MoeTable& table = moe_table(a);
  const MoeScratch s = moe_scratch_layout(n, E, k, H, dim, max_tiles);
  const void* old_scratch = moe_scratch_.data();
  ensure(moe_scratch_, s.total);
  uint8_t* base = static_cast<uint8_t*>(moe_scratch_.data());
  if (base != old_scratch) FERRY_CUDA_CHECK(cudaMemsetAsync(base + s.done, 0, 4, stream_));  // a new counter
  const auto i32 = [&](size_t off) { return reinterpret_cast<int32_t*>(base + off); };
  const auto f32 = [&](size_t off) { return reinterpret_cast<float*>(base + off); };

  const MoeRouterLogitsParams logits{.router = weight_view(a.router), .x = a.x.ptr<float>(), .logits = f32(s.logits),
                                     .n = n};
  const MoeRouteParams route{.logits = f32(s.logits), .expert = i32(s.expert), .weight = f32(s.weight), .n = n,
                             .n_experts = E, .top_k = k, .renormalize = a.norm == MoeNorm::Renormalize,
                             .errors = errors_};
  const MoeGroupParams group{.expert = i32(s.expert), .offsets = i32(s.offsets), .slots = i32(s.slots),
                             .active = i32(s.active), .tile_expert = i32(s.tile_expert),
                             .tile_begin = i32(s.tile_begin), .counts = i32(s.counts), .n_slots = int32_t(n_slots),
                             .n_experts = E, .tile_rows = kMoeGemmTileM, .errors = errors_};
  if (decode) {
    moe_route_decode(a.router.dtype,
                     {.logits = logits, .route = route, .group = group,
                      .done = reinterpret_cast<uint32_t*>(base + s.done)},
                     stream_);
  } else {
    moe_router_logits(a.router.dtype, logits, stream_);
    moe_route(route, stream_);
    moe_group(group, stream_);
  }
  const auto* experts = static_cast<const MoeExpertWeight*>(table.device.data());
  const auto pass = [&](DType type, const MoeExpertWeight* w, int64_t rows, int64_t cols, const float* in, int in_div,
                        float* out, MoeEpilogue epilogue) {
    const MoeExpertsParams p{.experts = w, .rows = rows, .cols = cols, .a = in, .a_div = in_div,
                             .gate = epilogue == MoeEpilogue::SwiGlu ? out : nullptr,
                             .up_experts = epilogue == MoeEpilogue::GateUp ? w + E : nullptr, .out = out,
                             .epilogue = epilogue, .offsets = i32(s.offsets), .slots = i32(s.slots),
                             .active = i32(s.active), .tile_expert = i32(s.tile_expert),
                             .tile_begin = i32(s.tile_begin), .counts = i32(s.counts), .max_groups = max_groups};
    if (decode) {
      moe_experts_matvec(type, p, stream_);
    } else {
      moe_experts_gemm(type, p, stream_);
    }
  };
  const float* x = a.x.ptr<float>();
  if (decode && gate_t == up_t) {  // gate and up rows in one launch
    pass(gate_t, experts, H, dim, x, k, f32(s.h), MoeEpilogue::GateUp);
  } else {
    pass(gate_t, experts, H, dim, x, k, f32(s.h), MoeEpilogue::Store);
    pass(up_t, experts + E, H, dim, x, k, f32(s.h), MoeEpilogue::SwiGlu);
  }
  pass(down_t, experts + 2 * E, dim, H, f32(s.h), 1, f32(s.y), MoeEpilogue::Store);
  moe_combine({.out = a.out.ptr<float>(), .y = f32(s.y), .weight = f32(s.weight), .n = n, .dim = dim, .top_k = k},
              stream_);
}

}  // namespace ferry
