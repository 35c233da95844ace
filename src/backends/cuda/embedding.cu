// One block per token; its threads walk the row's chunks (weight_layout.cuh), decode, and store each run
// with 16-byte stores.
#include "backends/cuda/embedding.cuh"

#include "backends/cuda/common.cuh"
#include "backends/cuda/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kThreads = 128;

template <class D>
__global__ void embedding_kernel(EmbeddingParams p) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t i = blockIdx.x;
  const int32_t id = p.ids[i];
  if (id < 0 || id >= p.table.rows) {
    if (threadIdx.x == 0) report_error(p.errors, kBadTokenId, id);
    return;
  }
  const int64_t dim = p.table.cols;
  float* dst = p.out + size_t(i) * size_t(dim);
  // kLoadsAhead chunks per thread are loaded before any is decoded and stored: with one load per iteration a
  // block made a DRAM round trip per 2 KB (measured 43-55% of copy bandwidth at 512..8192 tokens, BF16).
  constexpr int kLoadsAhead = 4;
  const int64_t chunks = D::chunks(dim);
  for (int64_t c0 = threadIdx.x; c0 < chunks; c0 += kThreads * kLoadsAhead) {
    typename D::Raw raw[kLoadsAhead];
#pragma unroll
    for (int u = 0; u < kLoadsAhead; ++u) {
      if (c0 + u * kThreads < chunks) raw[u] = D::load(p.table, id, c0 + u * kThreads);
    }
#pragma unroll
    for (int u = 0; u < kLoadsAhead; ++u) {
      const int64_t c = c0 + u * kThreads;
      if (c >= chunks) break;
      float v[D::kVals];
      D::decode(raw[u], v);
#pragma unroll
      for (int r = 0; r < D::kRuns; ++r) {
        float4* o = reinterpret_cast<float4*>(dst + D::run_start(c, r));
#pragma unroll
        for (int j = 0; j < D::kRunLen / 4; ++j) {
          const float* s = v + r * D::kRunLen + 4 * j;
          o[j] = make_float4(s[0], s[1], s[2], s[3]);
        }
      }
    }
  }
}

}  // namespace

void embedding(DType ttype, const EmbeddingParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.out) % 16 == 0 && p.table.cols % 4 == 0);
  FERRY_CUDA_REQUIRE(p.n <= 0x7FFFFFFF);
  const bool ok = visit_decoder(ttype, [&]<class D>() {
    FERRY_CUDA_REQUIRE(p.table.cols % D::kVals == 0);
    launch_pdl(embedding_kernel<D>, dim3(unsigned(p.n)), dim3(kThreads), 0, stream, p);
    FERRY_CUDA_CHECK_LAUNCH(embedding_kernel);
  });
  FERRY_CUDA_REQUIRE(ok);
}

}  // namespace ferry::cuda_ops
