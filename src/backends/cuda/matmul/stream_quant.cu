// The streamed quantized matvec (kStreamQuant) (design: stream_quant.cuh): which shapes it takes and the launch, plain and in its SwiGLU form.
#include "backends/cuda/matmul/stream_quant.cuh"

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/matmul/stream_quant_plan.cuh"

namespace ferry::cuda_ops {
namespace {

// The plan for `units` output rows (the SwiGLU form: hidden units, two weight rows each) of `cols` columns, when
// kStreamQuant takes it: a quantized type it streams, one token, columns a multiple of 512 up to max_cols, at least
// two ring stages, and the shared memory within the device's opt-in limit. plan.stages == 0 otherwise.
streaming::StreamPlan plan_for(DType wtype, int n_tokens, int64_t units, int64_t cols, int64_t max_cols, bool swiglu,
                        int n_sms, size_t max_smem) {
  const bool ok = quant_stream::stream_type(wtype) && n_tokens == 1 && units >= 1 && n_sms >= 1 &&
                  quant_stream::stream_cols_ok(wtype, cols) && cols <= max_cols &&
                  (!swiglu || quant_stream::stage_rows(wtype, cols) >= 2);
  if (!ok) return streaming::StreamPlan{};
  const streaming::StreamPlan plan = quant_stream::make_plan(wtype, units, cols, streaming::stream_grid(units, n_sms));
  return plan.stages >= 2 && quant_stream::smem_bytes(plan, wtype, cols, swiglu) <= max_smem ? plan : streaming::StreamPlan{};
}

using Launch = void (*)(const MatvecParams&, const streaming::StreamPlan&, int64_t, size_t, cudaStream_t);

// One launch over `units` output rows (checked by the callers' supports()).
void launch(DType wtype, const MatvecParams& p, int64_t units, bool swiglu, cudaStream_t stream) {
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  if (p.in_norm.residual != nullptr) {  // x is computed, not read
    FERRY_CUDA_REQUIRE(stream_quant_in_norm_applies(wtype, p.w.cols) && p.in_norm.weight != nullptr &&
                       aligned(p.in_norm.residual) && aligned(p.in_norm.delta) && aligned(p.in_norm.weight));
  } else {
    FERRY_CUDA_REQUIRE(aligned(p.x));
  }
  FERRY_CUDA_REQUIRE(aligned(p.w.data));
  FERRY_CUDA_REQUIRE(p.residual_add.residual == nullptr ||
                     (!swiglu && p.residual_add.delta != nullptr));
  FERRY_CUDA_REQUIRE(p.w.scales % 16 == 0);
  const int64_t grid = streaming::stream_grid(units, streaming::device_sm_count());
  const streaming::StreamPlan plan = quant_stream::make_plan(wtype, units, p.w.cols, grid);
  const size_t smem = streaming::one_block_per_sm(quant_stream::smem_bytes(plan, wtype, p.w.cols, swiglu));
  Launch fn = nullptr;
  switch (wtype) {
    case DType::Q8_0: fn = swiglu ? quant_stream::launch_q8_swiglu : quant_stream::launch_q8; break;
    case DType::Q4_0: fn = swiglu ? quant_stream::launch_q4_swiglu : quant_stream::launch_q4; break;
    case DType::Q4_K: fn = swiglu ? quant_stream::launch_q4k_swiglu : quant_stream::launch_q4k; break;
    case DType::Q5_K: fn = swiglu ? quant_stream::launch_q5k_swiglu : quant_stream::launch_q5k; break;
    case DType::Q6_K: fn = swiglu ? quant_stream::launch_q6k_swiglu : quant_stream::launch_q6k; break;
    default: FERRY_CUDA_REQUIRE(!"stream_quant: a type it does not stream");
  }
  fn(p, plan, grid, smem, stream);
}

}  // namespace

bool stream_quant_supports(DType wtype, int n_tokens, int64_t rows, int64_t cols, int n_sms, size_t max_smem) {
  return plan_for(wtype, n_tokens, rows, cols, quant_stream::kMaxCols, false, n_sms, max_smem).stages > 0;
}

bool stream_quant_applies(DType wtype, int n_tokens, int64_t rows, int64_t cols) {
  return stream_quant_supports(wtype, n_tokens, rows, cols, streaming::device_sm_count(), streaming::device_max_smem());
}

void stream_quant(DType wtype, const MatvecParams& p, cudaStream_t stream) {
  FERRY_CUDA_REQUIRE(stream_quant_applies(wtype, p.n_tokens, p.w.rows, p.w.cols));
  launch(wtype, p, p.w.rows, false, stream);
}

bool stream_quant_stacked_supports(DType head, int64_t head_rows, DType tail, int64_t tail_rows, int64_t cols,
                                   int n_sms, size_t max_smem) {
  if (!quant_stream::stacked_cols_ok(head, tail, cols) || head_rows < 1 || tail_rows < 1 || n_sms < 2) return false;
  const quant_stream::StackedGrid g = quant_stream::stacked_grid(head, head_rows, tail, tail_rows, cols, n_sms);
  const auto fits = [&](DType w, int64_t rows, int64_t grid) {
    const streaming::StreamPlan plan = quant_stream::make_plan(w, rows, cols, grid);
    return plan.stages >= 2 && quant_stream::smem_bytes(plan, w, cols) <= max_smem;
  };
  return fits(head, head_rows, g.head) && fits(tail, tail_rows, g.tail);
}

void stream_quant_stacked(DType head, DType tail, const MatvecParams& p, const WeightView& tail_w, cudaStream_t stream) {
  const int n_sms = streaming::device_sm_count();
  FERRY_CUDA_REQUIRE(p.n_tokens == 1 && tail_w.cols == p.w.cols &&
                     stream_quant_stacked_supports(head, p.w.rows, tail, tail_w.rows, p.w.cols, n_sms,
                                                   streaming::device_max_smem()));
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  if (p.in_norm.residual != nullptr) {
    FERRY_CUDA_REQUIRE(p.in_norm.weight != nullptr && aligned(p.in_norm.residual) && aligned(p.in_norm.delta) &&
                       aligned(p.in_norm.weight));
  } else {
    FERRY_CUDA_REQUIRE(aligned(p.x));
  }
  FERRY_CUDA_REQUIRE(aligned(p.w.data) && aligned(tail_w.data) && p.w.scales % 16 == 0 && tail_w.scales % 16 == 0);
  FERRY_CUDA_REQUIRE(p.residual_add.residual == nullptr && p.peer_push.counter == nullptr);
  const int64_t cols = p.w.cols;
  const quant_stream::StackedGrid g = quant_stream::stacked_grid(head, p.w.rows, tail, tail_w.rows, cols, n_sms);
  MatvecParams pt = p;
  pt.w = tail_w;
  pt.out = p.out + p.w.rows;  // (1, tail rows): the stack's rows after the head's
  pt.bias = p.bias != nullptr ? p.bias + p.w.rows : nullptr;
  pt.stamps = PhaseStamps{};  // block 0 (the head's) stamps the launch
  const streaming::StreamPlan plan_h = quant_stream::make_plan(head, p.w.rows, cols, g.head);
  const streaming::StreamPlan plan_t = quant_stream::make_plan(tail, tail_w.rows, cols, g.tail);
  const size_t sh = quant_stream::smem_bytes(plan_h, head, cols), st = quant_stream::smem_bytes(plan_t, tail, cols);
  const quant_stream::StackedLaunch l{.head = p, .tail = pt, .plan_head = plan_h, .plan_tail = plan_t,
                                      .grid_head = g.head, .grid_tail = g.tail,
                                      .smem = streaming::one_block_per_sm(sh > st ? sh : st)};
  if (head == DType::Q4_K) {
    quant_stream::launch_stacked_q4k_q6k(l, stream);
  } else {
    quant_stream::launch_stacked_q5k_q6k(l, stream);
  }
}

bool stream_quant_in_norm_applies(DType wtype, int64_t cols) {
  return quant_stream::stream_type(wtype) && quant_stream::stream_cols_ok(wtype, cols) &&
         quant_stream::segs_per_warp(cols) == 1 && cols <= kInNormMaxCols;
}

bool stream_quant_swiglu_supports(DType wtype, int n_tokens, int64_t weight_rows, int64_t cols, int n_sms,
                                size_t max_smem) {
  return weight_rows % 2 == 0 &&
         plan_for(wtype, n_tokens, weight_rows / 2, cols, quant_stream::kSwigluMaxCols, true, n_sms, max_smem).stages > 0;
}

bool stream_quant_swiglu_applies(DType wtype, int n_tokens, int64_t weight_rows, int64_t cols) {
  return stream_quant_swiglu_supports(wtype, n_tokens, weight_rows, cols, streaming::device_sm_count(), streaming::device_max_smem());
}

void stream_quant_swiglu(DType wtype, const MatvecParams& p, cudaStream_t stream) {
  FERRY_CUDA_REQUIRE(stream_quant_swiglu_applies(wtype, p.n_tokens, p.w.rows, p.w.cols));
  FERRY_CUDA_REQUIRE(p.bias == nullptr);
  launch(wtype, p, p.w.rows / 2, true, stream);
}

}  // namespace ferry::cuda_ops
