// CudaBackend's fused ops of a one-token decode step: a projection with the residual add + RMSNorm after it, and a
// layer's whole tail after the attention (decode_ffn.cuh). Each falls back to Backend's composition of single ops
// where its kernel does not take the shapes.
#include <fmt/format.h>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_backend_views.h"
#include "backends/cuda/decode_ffn.cuh"
#include "backends/cuda/matmul_dispatch.h"
#include "backends/cuda/matvec.cuh"
#include "backends/cuda/matvec_v10.cuh"
#include "backends/cuda/op_profiler.h"
#include "backends/cuda/stamp_table.h"
#include "core/check.h"

namespace ferry {

int CudaBackend::add_norm_version(int64_t n, const Tensor& w) const {
  if (n != 1 || !options_.fused_add_norm) return 0;
  // The matvec path never depends on the output's alignment (only the Hopper GEMM's choice does).
  const MatmulChoice choice = choose_matmul(n, w, Tensor{});
  const bool fused = choice.path == cuda_ops::MatmulPath::Matvec &&
                     cuda_ops::matvec_add_norm_applies(w.dtype, choice.matvec_version, 1, w.rows(), w.cols());
  return fused ? choice.matvec_version : 0;
}

bool CudaBackend::add_norm_fused(int64_t n, const Tensor& w) const { return add_norm_version(n, w) != 0; }

void CudaBackend::matmul_add_rms_norm(const Tensor& out, const Tensor& residual, const Tensor& delta, const Tensor& x,
                                      const Tensor& w, const Tensor& norm_weight, float eps) {
  const int64_t n = x.rows(), dim = w.rows();
  // The fused epilogue: one token on the streamed matvec (versions 9 / 10) that matmul() would run anyway.
  const int version = add_norm_version(n, w);
  if (version == 0 || x.dtype != DType::F32 || delta.dtype != DType::F32) {
    Backend::matmul_add_rms_norm(out, residual, delta, x, w, norm_weight, eps);
    return;
  }
  require_cuda(out, "matmul_add_rms_norm output");
  require_cuda(residual, "matmul_add_rms_norm residual");
  require_cuda(delta, "matmul_add_rms_norm delta");
  require_cuda(x, "matmul_add_rms_norm input");
  require_cuda(w, "matmul_add_rms_norm weight");
  require_cuda(norm_weight, "matmul_add_rms_norm norm weight");
  FERRY_ASSERT(x.cols() == w.cols() && delta.rows() == 1 && delta.cols() == dim);
  FERRY_ASSERT(residual.dtype == DType::F32 && residual.rows() == 1 && residual.cols() == dim);
  FERRY_ASSERT(out.rows() == 1 && out.cols() == dim && (out.dtype == DType::F32 || out.dtype == DType::BF16));
  FERRY_ASSERT(norm_weight.dtype == DType::F32 && norm_weight.numel() == dim);
  const cuda_ops::OpProfiler::Scope prof(
      profiler_.get(),
      profiler_ ? fmt::format("matmul+add_rms_norm matvec v{} {} {}x{} n=1", version,
                              dtype_name(w.dtype), dim, w.cols())
                : std::string(),
      double(w.nbytes()) + double(x.nbytes()) + 4.0 * double(residual.nbytes()));
  const bool bf16 = out.dtype == DType::BF16;
  cuda_ops::matvec(w.dtype,
                   {.w = weight_view(w), .x = x.ptr<float>(), .bias = nullptr, .out = delta.ptr<float>(), .n_tokens = 1,
                    .version = version, .scratch = nullptr,
                    .add_norm = {.residual = residual.ptr<float>(), .weight = norm_weight.ptr<float>(),
                                 .out = bf16 ? nullptr : out.ptr<float>(),
                                 .out_bf16 = bf16 ? static_cast<uint16_t*>(out.data) : nullptr, .eps = eps,
                                 .counter = static_cast<unsigned int*>(add_norm_counter_.data())}},
                   stream_);
}

bool CudaBackend::norm_in_matmul(int64_t n_tokens, const Tensor& w) const {
  // Only with the layer tail that can end without the next norm (attn_out_ffn's prologue-norm form): the persistent
  // decode_ffn kernel and the fused add + norm epilogue compute that norm themselves.
  if (n_tokens != 1 || !options_.qkv_norm || !options_.prologue_norm || !options_.quant_swiglu ||
      options_.fused_add_norm || options_.decode_ffn)
    return false;
  // Where matmul would run version 10 on w anyway (its lane math: same bits as rms_norm then matmul).
  const MatmulChoice choice = choose_matmul(1, w, Tensor{});
  return choice.path == cuda_ops::MatmulPath::Matvec && choice.matvec_version == 10 &&
         cuda_ops::matvec_v10_in_norm_applies(w.dtype, w.cols());
}

void CudaBackend::rms_norm_matmul(const Tensor& out, const Tensor& normed, const Tensor& x, const Tensor& norm_weight,
                                  float eps, const Tensor& w, const Tensor& bias) {
  const auto aligned = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data) % 16 == 0; };
  if (!norm_in_matmul(x.rows(), w) || x.dtype != DType::F32 || !aligned(x) || norm_weight.dtype != DType::F32 ||
      !aligned(norm_weight) || out.dtype != DType::F32 || (!bias.empty() && bias.dtype != DType::F32)) {
    Backend::rms_norm_matmul(out, normed, x, norm_weight, eps, w, bias);
    return;
  }
  require_cuda(out, "rms_norm_matmul output");
  require_cuda(x, "rms_norm_matmul input");
  require_cuda(w, "rms_norm_matmul weight");
  require_cuda(norm_weight, "rms_norm_matmul norm weight");
  if (!bias.empty()) require_cuda(bias, "rms_norm_matmul bias");
  FERRY_ASSERT(x.rows() == 1 && x.cols() == w.cols() && norm_weight.numel() == w.cols() && out.numel() == w.rows() &&
               (bias.empty() || bias.numel() == w.rows()));
  const cuda_ops::OpProfiler::Scope prof(
      profiler_.get(),
      profiler_ ? fmt::format("norm+matmul matvec v10 {} {}x{} n=1", dtype_name(w.dtype), w.rows(), w.cols())
                : std::string(),
      double(w.nbytes()));
  cuda_ops::matvec(w.dtype,
                   {.w = weight_view(w), .x = nullptr, .bias = bias.empty() ? nullptr : bias.ptr<float>(),
                    .out = out.ptr<float>(), .n_tokens = 1, .version = 10,
                    .in_norm = {.residual = x.ptr<float>(), .delta = nullptr, .weight = norm_weight.ptr<float>(),
                                .eps = eps},
                    .stamps = matvec_stamps("norm+matmul", w), .stream = weight_stream(w.dtype),
                    .one_level_acts = options_.one_level_acts},
                   stream_);
}

bool CudaBackend::matmul_pushes(int64_t n_tokens, const Tensor& w) const {
  if (n_tokens != 1) return false;
  // The kernels whose epilogue stores through v7::store_row: version 10 (quantized) and version 9 on 16-bit weights
  // (version 9 on quantized weights is matvec_stream_quant's kernel, which does not push).
  const MatmulChoice choice = choose_matmul(1, w, Tensor{});
  const bool wide = w.dtype == DType::BF16 || w.dtype == DType::F16;
  return choice.path == cuda_ops::MatmulPath::Matvec &&
         (choice.matvec_version == 10 || (choice.matvec_version == 9 && wide)) &&
         w.rows() <= int64_t(PeerAllReduce::kMaxBytes / 4);
}

void CudaBackend::matmul_peer_push(const Tensor& out, const Tensor& x, const Tensor& w,
                                   const PeerAllReduce::PushTarget& target) {
  FERRY_CHECK(matmul_pushes(x.rows(), w), "matmul_peer_push: matmul at {} tokens on {} {}x{} runs no streamed matvec",
              x.rows(), dtype_name(w.dtype), w.rows(), w.cols());
  require_cuda(out, "matmul_peer_push output");
  require_cuda(x, "matmul_peer_push input");
  require_cuda(w, "matmul_peer_push weight");
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::F32 && x.rows() == 1 && x.cols() == w.cols() &&
               out.numel() == w.rows() && target.counter != nullptr);
  const int version = choose_matmul(1, w, Tensor{}).matvec_version;
  const cuda_ops::OpProfiler::Scope prof(
      profiler_.get(),
      profiler_ ? fmt::format("matmul+peer push matvec v{} {} {}x{} n=1", version, dtype_name(w.dtype), w.rows(),
                              w.cols())
                : std::string(),
      double(w.nbytes()));
  cuda_ops::MatvecPeerPush push{.set_stride = target.set_stride, .counter = target.counter};
  static_assert(cuda_ops::MatvecPeerPush::kMaxRanks == PeerAllReduce::kMaxWorld);
  for (int q = 0; q < PeerAllReduce::kMaxWorld; ++q) push.slot[q] = target.slot[q];
  // As matmul(): a quantized weight's version 9 reads its activations from version 5's pre-pass scratch.
  const size_t scratch = cuda_ops::matvec_scratch_bytes(w.dtype, version, 1, w.cols());
  if (scratch > 0) ensure(x_bf16_, scratch);
  cuda_ops::matvec(w.dtype,
                   {.w = weight_view(w), .x = x.ptr<float>(), .bias = nullptr, .out = out.ptr<float>(), .n_tokens = 1,
                    .version = version, .scratch = scratch > 0 ? x_bf16_.data() : nullptr,
                    .stamps = matvec_stamps("matvec+push", w), .stream = weight_stream(w.dtype),
                    .one_level_acts = options_.one_level_acts, .peer_push = push},
                   stream_);
}

bool CudaBackend::decode_ffn_applies(const AttnOutFfn& a) const {
  if (!options_.decode_ffn || a.attn.rows() != 1 || a.attn.dtype != DType::F32 || a.out.dtype != DType::F32 ||
      a.next_norm.empty())
    return false;
  const DType t = a.wo.dtype;
  if (a.w_gate_up.dtype != t || a.w_down.dtype != t || (t != DType::Q8_0 && t != DType::Q4_0)) return false;
  // Where matmul and matmul_swiglu would run matvec version 10 on each weight anyway (the fused kernel is its
  // stage loop: same bits), so a FERRY_CUDA_MATVEC or FERRY_CUDA_QUANT_SWIGLU choice keeps the single ops.
  for (const Tensor* w : {&a.wo, &a.w_gate_up, &a.w_down})
    if (choose_matmul(1, *w, Tensor{}).matvec_version != 10) return false;
  return options_.quant_swiglu &&
         cuda_ops::decode_ffn_applies(t, a.wo.cols(), a.wo.rows(), a.w_down.cols());
}

bool CudaBackend::prologue_norm_applies(const AttnOutFfn& a) const {
  if (!options_.prologue_norm || !options_.quant_swiglu || options_.fused_add_norm || a.attn.rows() != 1)
    return false;
  for (const Tensor* t : {&a.attn, &a.residual, &a.delta, &a.act, &a.ffn_norm})
    if (t->dtype != DType::F32 || reinterpret_cast<uintptr_t>(t->data) % 16 != 0) return false;
  // Where matmul and matmul_swiglu would run version 10 on each weight anyway (its lane math: same bits).
  for (const Tensor* w : {&a.wo, &a.w_gate_up, &a.w_down})
    if (choose_matmul(1, *w, Tensor{}).matvec_version != 10) return false;
  const int64_t dim = a.wo.rows();
  return a.act.numel() >= a.w_down.cols() &&
         cuda_ops::matvec_v10_swiglu_applies(a.w_gate_up.dtype, 1, a.w_gate_up.rows(), dim) &&
         cuda_ops::matvec_v10_in_norm_applies(a.w_gate_up.dtype, dim);
}

void CudaBackend::attn_out_ffn(const AttnOutFfn& a) {
  if (!decode_ffn_applies(a) && prologue_norm_applies(a)) {
    // delta = attn . wo^T; act = SwiGLU of w_gate|w_up . (rms_norm(residual + delta) * ffn_norm), the norm in the
    // matvec's prologue; delta' = act . w_down^T with residual += delta (deferred) row by row before delta' is
    // stored over it; then out = rms_norm(residual += delta') * next_norm, or without next_norm residual += delta'
    // in the same rows (MatvecResidualAdd::add_out) and out unwritten (the next rms_norm_matmul norms). The same
    // roundings in the same order as Backend::attn_out_ffn; ffn_in and gate_up are left unwritten.
    const int64_t dim = a.wo.rows(), hidden = a.w_down.cols();
    FERRY_ASSERT(a.attn.cols() == a.wo.cols() && a.w_gate_up.rows() == 2 * hidden && a.w_gate_up.cols() == dim &&
                 a.w_down.rows() == dim && a.residual.numel() == dim && a.delta.numel() == dim &&
                 a.ffn_norm.numel() == dim);
    for (const Tensor* t : {&a.attn, &a.residual, &a.delta, &a.act, &a.wo, &a.w_gate_up, &a.w_down, &a.ffn_norm})
      require_cuda(*t, "attn_out_ffn operand");
    {
      const cuda_ops::OpProfiler::Scope prof(
          profiler_.get(),
          profiler_ ? fmt::format("attn_out_ffn wo matvec v10 {} {}x{} n=1", std::string(dtype_name(a.wo.dtype)),
                                  dim, a.wo.cols())
                    : std::string(),
          double(a.wo.nbytes()));
      cuda_ops::matvec(a.wo.dtype,
                       {.w = weight_view(a.wo), .x = a.attn.ptr<float>(), .bias = nullptr, .out = a.delta.ptr<float>(),
                        .n_tokens = 1, .version = 10, .stamps = matvec_stamps("attn_out_ffn wo", a.wo),
                        .stream = weight_stream(a.wo.dtype), .one_level_acts = options_.one_level_acts},
                       stream_);
    }
    {
      const cuda_ops::OpProfiler::Scope prof(
          profiler_.get(),
          profiler_ ? fmt::format("attn_out_ffn norm+gate|up matvec v10 {} {}x{} n=1",
                                  std::string(dtype_name(a.w_gate_up.dtype)), 2 * hidden, dim)
                    : std::string(),
          double(a.w_gate_up.nbytes()));
      cuda_ops::matvec_v10_swiglu(a.w_gate_up.dtype,
                                  {.w = weight_view(a.w_gate_up), .x = nullptr, .bias = nullptr,
                                   .out = a.act.ptr<float>(), .n_tokens = 1, .version = 10,
                                   .in_norm = {.residual = a.residual.ptr<float>(), .delta = a.delta.ptr<float>(),
                                               .weight = a.ffn_norm.ptr<float>(), .eps = a.eps},
                                   .stamps = matvec_stamps("attn_out_ffn norm+gate|up", a.w_gate_up),
                                   .stream = weight_stream(a.w_gate_up.dtype),
                                   .one_level_acts = options_.one_level_acts},
                                  stream_);
    }
    {
      const cuda_ops::OpProfiler::Scope prof(
          profiler_.get(),
          profiler_ ? fmt::format("attn_out_ffn down+add matvec v10 {} {}x{} n=1",
                                  std::string(dtype_name(a.w_down.dtype)), dim, hidden)
                    : std::string(),
          double(a.w_down.nbytes()));
      const Tensor act = Tensor::make(DType::F32, {1, hidden}, a.act.data, a.act.device);
      cuda_ops::matvec(a.w_down.dtype,
                       {.w = weight_view(a.w_down), .x = act.ptr<float>(), .bias = nullptr,
                        .out = a.delta.ptr<float>(), .n_tokens = 1, .version = 10,
                        .residual_add = {.residual = a.residual.ptr<float>(), .delta = a.delta.ptr<float>(),
                                         .add_out = a.next_norm.empty()},
                        .stamps = matvec_stamps("attn_out_ffn down+add", a.w_down),
                        .stream = weight_stream(a.w_down.dtype), .one_level_acts = options_.one_level_acts},
                       stream_);
    }
    if (!a.next_norm.empty()) add_rms_norm(a.out, a.residual, a.delta, a.next_norm, a.eps);
    return;
  }
  if (!decode_ffn_applies(a)) {
    Backend::attn_out_ffn(a);
    return;
  }
  const int64_t dim = a.wo.rows(), hidden = a.w_down.cols();
  require_cuda(a.out, "attn_out_ffn output");
  require_cuda(a.residual, "attn_out_ffn residual");
  require_cuda(a.attn, "attn_out_ffn input");
  require_cuda(a.act, "attn_out_ffn activation scratch");
  for (const Tensor* w : {&a.wo, &a.w_gate_up, &a.w_down, &a.ffn_norm, &a.next_norm})
    require_cuda(*w, "attn_out_ffn weight");
  FERRY_ASSERT(a.attn.cols() == a.wo.cols() && a.w_gate_up.rows() == 2 * hidden && a.w_gate_up.cols() == dim &&
               a.w_down.rows() == dim);
  FERRY_ASSERT(a.residual.dtype == DType::F32 && a.residual.rows() == 1 && a.residual.cols() == dim);
  FERRY_ASSERT(a.out.rows() == 1 && a.out.cols() == dim);
  FERRY_ASSERT(a.act.dtype == DType::F32 && a.act.numel() >= hidden);
  FERRY_ASSERT(a.ffn_norm.dtype == DType::F32 && a.ffn_norm.numel() == dim && a.next_norm.dtype == DType::F32 &&
               a.next_norm.numel() == dim);
  const cuda_ops::OpProfiler::Scope prof(
      profiler_.get(),
      profiler_ ? fmt::format("attn_out_ffn decode_ffn {} {}x{} n=1", dtype_name(a.wo.dtype), dim, hidden)
                : std::string(),
      double(a.wo.nbytes()) + double(a.w_gate_up.nbytes()) + double(a.w_down.nbytes()));
  cuda_ops::decode_ffn(a.wo.dtype,
                       {.attn = a.attn.ptr<float>(), .wo = weight_view(a.wo), .residual = a.residual.ptr<float>(),
                        .ffn_norm = a.ffn_norm.ptr<float>(), .w_gate_up = weight_view(a.w_gate_up),
                        .act = a.act.ptr<float>(), .w_down = weight_view(a.w_down),
                        .next_norm = a.next_norm.ptr<float>(), .out = a.out.ptr<float>(), .eps = a.eps,
                        .barrier = static_cast<unsigned long long*>(decode_ffn_barrier_.data()),
                        .stream = weight_stream(a.wo.dtype)},
                       stream_);
}

}  // namespace ferry
