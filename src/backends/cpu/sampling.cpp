// CpuBackend::sample and resolve_placeholders: the "device" of the CPU backend is host memory, so sampling on it
// is the reference Sampler (sampling/sampler.h) itself, one row per chunk of the thread pool.
#include <exception>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/check.h"
#include "sampling/sampler.h"
#include "sampling/token_mask.h"

namespace ferry {

void CpuBackend::sample(const Tensor& out, const Tensor& logits, std::span<const SamplingParams> params,
                        std::span<const uint64_t> positions, std::span<const uint64_t> mask) {
  // out: (m) i32; logits: (m, vocab) f32; params, positions: (m); mask: empty or (m, words) u64
  const int64_t m = logits.rows(), vocab = logits.cols();
  const int64_t words = (vocab + 63) / 64;
  FERRY_CHECK(logits.dtype == DType::F32 && out.dtype == DType::I32 && out.numel() >= m &&
                  params.size() == size_t(m) && positions.size() == size_t(m) &&
                  (mask.empty() || mask.size() == size_t(m * words)),
              "sample: {} rows of logits, {} outputs, {} settings, {} positions, {} mask words", m, out.numel(),
              params.size(), positions.size(), mask.size());
  for (const SamplingParams& p : params)
    FERRY_CHECK(!p.penalties_active(), "sample: penalties are applied on the host, not by the backend's sampler");
  int32_t* ids = out.ptr<int32_t>();
  const float* rows = logits.ptr<float>();
  // One Sampler per row, kept between calls (its vocabulary-sized buffers are not made and zeroed every step); a
  // draw depends only on (logits, params, position), never on a Sampler's earlier calls.
  if (samplers_.size() < size_t(m)) samplers_.resize(size_t(m));
  for (int64_t i = 0; i < m; ++i) {
    std::unique_ptr<Sampler>& s = samplers_[size_t(i)];
    if (s == nullptr || s->vocab_size() != int32_t(vocab)) {
      s = std::make_unique<Sampler>(params[size_t(i)], int32_t(vocab));
    } else {
      s->set_params(params[size_t(i)]);
    }
  }
  pool_.run_chunks(m, [&](int64_t i) {
    if (!mask.empty())
      apply_token_mask({logits.ptr<float>() + i * vocab, size_t(vocab)}, mask.subspan(size_t(i * words), size_t(words)));
    try {
      ids[i] = samplers_[size_t(i)]->sample_at({rows + i * vocab, size_t(vocab)}, positions[size_t(i)]);
    } catch (const std::exception&) {  // every logit NaN/-inf: nothing to draw (the CUDA kernel's -1)
      ids[i] = -1;
    }
  });
}

void CpuBackend::resolve_placeholders(const Tensor& ids, const Tensor& sampled) {
  // ids: (n) i32 in place; sampled: (rows) i32
  FERRY_CHECK(ids.dtype == DType::I32 && sampled.dtype == DType::I32, "resolve_placeholders: i32 ids expected");
  int32_t* id = ids.ptr<int32_t>();
  const int32_t* from = sampled.ptr<int32_t>();
  const int64_t rows = sampled.numel();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    if (id[i] >= 0) continue;
    const int64_t row = -int64_t(id[i]) - 1;
    FERRY_CHECK(row < rows, "token placeholder for sampled row {} (the previous step sampled {} rows)", row, rows);
    id[i] = from[row] >= 0 ? from[row] : 0;  // -1 (nothing was drawn): that request fails at its postprocess; its row here is wasted
  }
}

}  // namespace ferry
