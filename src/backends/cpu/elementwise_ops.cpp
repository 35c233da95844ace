// The CPU backend's optional element-wise ops (Backend::supports): GeGLU with the tanh GELU (Gemma's FFN),
// soft-capping (Gemma 2's logits) and scaling (Gemma's embedding). Reference: plain loops with std::tanh; Fast: the
// GELU's tanh through the SIMD exp kernel, tanh(u) = 1 - 2 / (1 + exp(2u)).
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_backend.h"

namespace ferry {
namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;
constexpr int64_t kChunk = 256;  // floats per pass of the fast GeGLU (its exp scratch lives on the stack)

float gelu_tanh(float g) { return 0.5f * g * (1.0f + std::tanh(kGeluK * (g + kGeluC * g * g * g))); }

}  // namespace

bool CpuBackend::supports(ModelFeature feature) const {
  switch (feature) {
    case ModelFeature::GeluTanhGlu:
    case ModelFeature::SoftCap:
    case ModelFeature::SlidingWindow:
    case ModelFeature::Scale:
      return true;
  }
  return false;
}

void CpuBackend::geglu_tanh(const Tensor& out, const Tensor& gate, const Tensor& up) {
  const int64_t total = gate.numel();
  FERRY_ASSERT(up.numel() == total && out.numel() == total);
  const float* g = gate.ptr<float>();
  const float* u = up.ptr<float>();
  float* o = out.ptr<float>();
  if (options_.kernels == CpuKernels::Reference) {
    pool_.parallel_for(total, 4096, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) o[i] = gelu_tanh(g[i]) * u[i];
    });
    return;
  }
  pool_.parallel_for(total, 4096, [&](int64_t i0, int64_t i1) {
    alignas(64) float e[kChunk];  // exp(2u) of the chunk, u = sqrt(2/pi) (g + 0.044715 g^3)
    for (int64_t c0 = i0; c0 < i1; c0 += kChunk) {
      const int64_t n = std::min<int64_t>(kChunk, i1 - c0);
      for (int64_t i = 0; i < n; ++i) {
        const float x = g[c0 + i];
        e[i] = 2.0f * kGeluK * (x + kGeluC * x * x * x);
      }
      vec_.exp(e, e, n);
      for (int64_t i = 0; i < n; ++i) {
        const float x = g[c0 + i];
        o[c0 + i] = x * (1.0f - 1.0f / (1.0f + e[i])) * u[c0 + i];  // 0.5 x (1 + tanh) = x (1 - 1 / (1 + e^{2u}))
      }
    }
  });
}

void CpuBackend::softcap(const Tensor& x, float cap) {
  FERRY_ASSERT(cap > 0 && x.dtype == DType::F32);
  float* v = x.ptr<float>();
  pool_.parallel_for(x.numel(), 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) v[i] = cap * std::tanh(v[i] / cap);
  });
}

void CpuBackend::scale(const Tensor& x, float s, int64_t n_leading) {
  const int64_t cols = x.shape[x.n_dims - 1], rows = x.numel() / cols;
  FERRY_ASSERT(x.dtype == DType::F32 && n_leading >= 0 && n_leading <= cols);
  float* v = x.ptr<float>();
  pool_.parallel_for(rows, std::max<int64_t>(1, 4096 / cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t i = 0; i < n_leading; ++i) v[r * cols + i] *= s;
  });
}

}  // namespace ferry
