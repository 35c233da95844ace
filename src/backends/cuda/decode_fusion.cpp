// The CUDA backend's decode-layer fusion, in one place: at one token, where the matmul plan (matmul/plan.h) streams
// the weights with the epilogues it names, a layer's attention norm runs in its q|k|v matvec's prologue
// (rms_norm_matmul), its tail after the attention is three launches (attn_out_ffn: wo; gate|up with the FFN norm in
// the prologue and the SwiGLU in the epilogue; down with the residual add, the next norm left to the next layer's
// q|k|v matvec), and across ranks a sublayer end is the peer all-reduce's fused reduce + add + norm, its projection
// pushing its rows to the peers where the plan allows (sublayer_end). Each op falls back to Backend's composition of
// single ops where the plan does not take the shapes; the fused forms give the same bits.
#include <fmt/format.h>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_backend_views.h"
#include "backends/cuda/diag/op_profiler.h"
#include "backends/cuda/diag/stamp_table.h"
#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/matmul/plan.h"
#include "backends/cuda/matmul/stream_quant.cuh"
#include "core/check.h"
#include "ops/communicator.h"

namespace ferry {

void CudaBackend::rms_norm_matmul(const Tensor& out, const Tensor& normed, const Tensor& x, const Tensor& norm_weight,
                                  float eps, const Tensor& w, const Tensor& bias) {
  if (take_written_norm(normed, x, norm_weight)) {  // the sublayer end before wrote it
    matmul(out, normed, w, bias);
    return;
  }
  const auto aligned = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data) % 16 == 0; };
  if (!plan(x.rows(), w).in_norm || x.dtype != DType::F32 || !aligned(x) || norm_weight.dtype != DType::F32 ||
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
      profiler_ ? fmt::format("norm+matmul stream_quant {} {}x{} n=1", dtype_name(w.dtype), w.rows(), w.cols())
                : std::string(),
      double(weight_nbytes(w)));
  const cuda_ops::MatvecParams p{
      .w = w.dtype == DType::Stacked ? cuda_ops::WeightView{} : weight_view(w), .x = nullptr,
      .bias = bias.empty() ? nullptr : bias.ptr<float>(), .out = out.ptr<float>(), .n_tokens = 1,
      .kernel = cuda_ops::MatvecKernel::kStreamQuant,
      .in_norm = {.residual = x.ptr<float>(), .delta = nullptr, .weight = norm_weight.ptr<float>(), .eps = eps},
      .stamps = matvec_stamps("norm+matmul", w), .stream = weight_stream(w.dtype),
      .one_level_acts = options_.tune.act_levels == 1};
  if (w.dtype == DType::Stacked) {  // a K-quant mix's q|k|v: one launch over both runs (stream_quant_stacked)
    stacked_matvec(w, p);
  } else {
    cuda_ops::matvec(w.dtype, p, stream_);
  }
}

void CudaBackend::sublayer_end(const SublayerEnd& s) {
  FERRY_ASSERT(s.group != nullptr);
  if (s.group->world() > 1 && peer_ && peer_sublayer_end(s)) {
    note_written_norm(s.out, s.residual, s.norm);
    return;
  }
  Backend::sublayer_end(s);
}

bool CudaBackend::peer_sublayer_end(const SublayerEnd& s) {
  // The fused kernel writes f32 rows; a bf16 out (the matmul input dtype at larger steps) takes the all-reduce and
  // then the backend's norm.
  const auto f32 = [](const Tensor& t) { return t.dtype == DType::F32; };
  if (!f32(s.out) || !f32(s.residual) || !f32(s.delta) || !f32(s.norm) ||
      !peer_->fits_add_rms_norm(s.delta.rows(), s.delta.cols()))
    return false;
  // kLamport only: a one-token projection on a streamed matvec pushes its output rows into the peers' slots from
  // its epilogue, and the all-reduce only polls (the same bits). Every rank decides alike: the same protocol, the
  // same shapes.
  const bool push = peer_->protocol() == PeerProtocol::kLamport && f32(s.x) && s.x.rows() == 1 &&
                    plan(1, s.w).peer_push && s.w.rows() <= int64_t(PeerAllReduce::kMaxBytes / 4);
  if (push) {
    matmul_peer_push(s.delta, s.x, s.w, peer_->push_target());
  } else {
    matmul(s.delta, s.x, s.w, Tensor{});
  }
  peer_->run_add_rms_norm(s.delta.ptr<float>(), s.residual.ptr<float>(), s.out.ptr<float>(), s.norm.ptr<float>(),
                          s.delta.rows(), s.delta.cols(), s.eps, stream_, /*pushed=*/push);
  return true;
}

void CudaBackend::matmul_peer_push(const Tensor& out, const Tensor& x, const Tensor& w,
                                   const PeerAllReduce::PushTarget& target) {
  require_cuda(out, "matmul_peer_push output");
  require_cuda(x, "matmul_peer_push input");
  require_cuda(w, "matmul_peer_push weight");
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::F32 && x.rows() == 1 && x.cols() == w.cols() &&
               out.numel() == w.rows() && target.counter != nullptr);
  const cuda_ops::MatvecKernel kernel = plan(1, w).matvec;
  const cuda_ops::OpProfiler::Scope prof(
      profiler_.get(),
      profiler_ ? fmt::format("matmul+peer push {} {} {}x{} n=1", cuda_ops::matvec_kernel_name(kernel),
                              dtype_name(w.dtype), w.rows(), w.cols())
                : std::string(),
      double(w.nbytes()));
  cuda_ops::MatvecPeerPush push{.set_stride = target.set_stride, .counter = target.counter};
  static_assert(cuda_ops::MatvecPeerPush::kMaxRanks == PeerAllReduce::kMaxWorld);
  for (int q = 0; q < PeerAllReduce::kMaxWorld; ++q) push.slot[q] = target.slot[q];
  cuda_ops::matvec(w.dtype,
                   {.w = weight_view(w), .x = x.ptr<float>(), .bias = nullptr, .out = out.ptr<float>(), .n_tokens = 1,
                    .kernel = kernel,
                    .stamps = matvec_stamps("matvec+push", w), .stream = weight_stream(w.dtype),
                    .one_level_acts = options_.tune.act_levels == 1, .peer_push = push},
                   stream_);
}

namespace {

// Whether attn_out_ffn's three streamed launches take the layer: one rank, one token, f32 operands 16-byte aligned,
// every weight streamed by the quantized matvec, gate|up with its SwiGLU and its input norm in that kernel.
bool three_launch_tail(const Backend::AttnOutFfn& a, const cuda_ops::MatmulPlan& wo, const cuda_ops::MatmulPlan& gate_up,
                       const cuda_ops::MatmulPlan& down) {
  if (a.group->world() != 1 || a.attn.rows() != 1) return false;
  for (const Tensor* t : {&a.attn, &a.residual, &a.delta, &a.act, &a.ffn_norm})
    if (t->dtype != DType::F32 || reinterpret_cast<uintptr_t>(t->data) % 16 != 0) return false;
  const auto streamed = [](const cuda_ops::MatmulPlan& p) {
    return p.kernel == cuda_ops::MatmulKernel::kMatvec && p.matvec == cuda_ops::MatvecKernel::kStreamQuant;
  };
  return streamed(wo) && streamed(gate_up) && streamed(down) && gate_up.in_norm && down.residual_add &&
         gate_up.swiglu == cuda_ops::SwigluKernel::kStreamQuant && a.act.numel() >= a.w_down.cols();
}

}  // namespace

void CudaBackend::attn_out_ffn(const AttnOutFfn& a) {
  FERRY_ASSERT(a.group != nullptr);
  if (!three_launch_tail(a, plan(1, a.wo), plan(1, a.w_gate_up), plan(1, a.w_down))) {
    Backend::attn_out_ffn(a);
    return;
  }
  {
    // delta = attn . wo^T; act = SwiGLU of w_gate|w_up . (rms_norm(residual + delta) * ffn_norm), the norm in the
    // matvec's prologue; delta' = act . w_down^T with residual += delta (deferred) row by row before delta' is
    // stored over it; then out = rms_norm(residual += delta') * next_norm, or, where the next layer's q|k|v matvec
    // takes the norm in its prologue, residual += delta' in the same rows (MatvecResidualAdd::add_out) and out
    // unwritten. The same roundings in the same order as Backend::attn_out_ffn; ffn_in and gate_up are left
    // unwritten.
    const bool defer_norm = !a.next_w.empty() && plan(1, a.next_w).in_norm;
    const int64_t dim = a.wo.rows(), hidden = a.w_down.cols();
    FERRY_ASSERT(a.attn.cols() == a.wo.cols() && a.w_gate_up.rows() == 2 * hidden && a.w_gate_up.cols() == dim &&
                 a.w_down.rows() == dim && a.residual.numel() == dim && a.delta.numel() == dim &&
                 a.ffn_norm.numel() == dim);
    for (const Tensor* t : {&a.attn, &a.residual, &a.delta, &a.act, &a.wo, &a.w_gate_up, &a.w_down, &a.ffn_norm})
      require_cuda(*t, "attn_out_ffn operand");
    {
      const cuda_ops::OpProfiler::Scope prof(
          profiler_.get(),
          profiler_ ? fmt::format("attn_out_ffn wo stream_quant {} {}x{} n=1", std::string(dtype_name(a.wo.dtype)),
                                  dim, a.wo.cols())
                    : std::string(),
          double(a.wo.nbytes()));
      cuda_ops::matvec(a.wo.dtype,
                       {.w = weight_view(a.wo), .x = a.attn.ptr<float>(), .bias = nullptr, .out = a.delta.ptr<float>(),
                        .n_tokens = 1, .kernel = cuda_ops::MatvecKernel::kStreamQuant, .stamps = matvec_stamps("attn_out_ffn wo", a.wo),
                        .stream = weight_stream(a.wo.dtype), .one_level_acts = options_.tune.act_levels == 1},
                       stream_);
    }
    {
      const cuda_ops::OpProfiler::Scope prof(
          profiler_.get(),
          profiler_ ? fmt::format("attn_out_ffn norm+gate|up stream_quant {} {}x{} n=1",
                                  std::string(dtype_name(a.w_gate_up.dtype)), 2 * hidden, dim)
                    : std::string(),
          double(a.w_gate_up.nbytes()));
      cuda_ops::stream_quant_swiglu(a.w_gate_up.dtype,
                                  {.w = weight_view(a.w_gate_up), .x = nullptr, .bias = nullptr,
                                   .out = a.act.ptr<float>(), .n_tokens = 1, .kernel = cuda_ops::MatvecKernel::kStreamQuant,
                                   .in_norm = {.residual = a.residual.ptr<float>(), .delta = a.delta.ptr<float>(),
                                               .weight = a.ffn_norm.ptr<float>(), .eps = a.eps},
                                   .stamps = matvec_stamps("attn_out_ffn norm+gate|up", a.w_gate_up),
                                   .stream = weight_stream(a.w_gate_up.dtype),
                                   .one_level_acts = options_.tune.act_levels == 1},
                                  stream_);
    }
    {
      const cuda_ops::OpProfiler::Scope prof(
          profiler_.get(),
          profiler_ ? fmt::format("attn_out_ffn down+add stream_quant {} {}x{} n=1",
                                  std::string(dtype_name(a.w_down.dtype)), dim, hidden)
                    : std::string(),
          double(a.w_down.nbytes()));
      const Tensor act = Tensor::make(DType::F32, {1, hidden}, a.act.data, a.act.device);
      cuda_ops::matvec(a.w_down.dtype,
                       {.w = weight_view(a.w_down), .x = act.ptr<float>(), .bias = nullptr,
                        .out = a.delta.ptr<float>(), .n_tokens = 1, .kernel = cuda_ops::MatvecKernel::kStreamQuant,
                        .residual_add = {.residual = a.residual.ptr<float>(), .delta = a.delta.ptr<float>(),
                                         .add_out = defer_norm},
                        .stamps = matvec_stamps("attn_out_ffn down+add", a.w_down),
                        .stream = weight_stream(a.w_down.dtype), .one_level_acts = options_.tune.act_levels == 1},
                       stream_);
    }
    if (defer_norm) {
      forget_written_norm();
    } else {
      add_rms_norm(a.out, a.residual, a.delta, a.next_norm, a.eps);
      note_written_norm(a.out, a.residual, a.next_norm);
    }
  }
}

}  // namespace ferry
