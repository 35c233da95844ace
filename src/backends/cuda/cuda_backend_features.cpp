// CudaBackend's ops beyond the Llama set (Backend::supports): GeGLU with the tanh GELU (Gemma's FFN), soft-capping
// (Gemma 2's logits; its attention scores are capped inside the attention kernels) and scaling (Gemma's embedding,
// longrope's attention factor). Sliding windows need no op: the attention kernels mask by AttentionMeta::window.
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_backend_views.h"
#include "backends/cuda/diag/op_profiler.h"
#include "backends/cuda/elementwise/elementwise.cuh"

namespace ferry {

using cuda_ops::OpProfiler;

bool CudaBackend::supports(ModelFeature feature) const {
  switch (feature) {
    case ModelFeature::GeluTanhGlu:
    case ModelFeature::SoftCap:
    case ModelFeature::SlidingWindow:
    case ModelFeature::Scale:
      return true;
  }
  return false;
}

void CudaBackend::geglu_tanh(const Tensor& out, const Tensor& gate, const Tensor& up) {
  const OpProfiler::Scope prof(profiler_.get(), "geglu_tanh", 3.0 * double(gate.nbytes()));
  require_cuda(out, "geglu output");
  require_cuda(gate, "geglu gate");
  require_cuda(up, "geglu up");
  const int64_t total = gate.numel();
  FERRY_ASSERT(up.numel() == total && out.numel() == total);
  FERRY_ASSERT(out.dtype == DType::F32 && gate.dtype == DType::F32 && up.dtype == DType::F32);
  cuda_ops::geglu_tanh(out.ptr<float>(), gate.ptr<float>(), up.ptr<float>(), total, stream_);
}

void CudaBackend::softcap(const Tensor& x, float cap) {
  const OpProfiler::Scope prof(profiler_.get(), "softcap", 2.0 * double(x.nbytes()));
  require_cuda(x, "softcap input");
  FERRY_ASSERT(cap > 0 && x.dtype == DType::F32);
  cuda_ops::softcap(x.ptr<float>(), cap, x.numel(), stream_);
}

void CudaBackend::scale(const Tensor& x, float s, int64_t n_leading) {
  const OpProfiler::Scope prof(profiler_.get(), "scale", 2.0 * double(x.nbytes()));
  require_cuda(x, "scale input");
  const int64_t cols = x.shape[x.n_dims - 1], rows = x.numel() / cols;
  FERRY_ASSERT(x.dtype == DType::F32 && n_leading >= 0 && n_leading <= cols);
  cuda_ops::scale_leading(x.ptr<float>(), s, rows, cols, n_leading, stream_);
}

}  // namespace ferry
