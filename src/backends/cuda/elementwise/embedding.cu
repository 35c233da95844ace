// Two kernels:
//  - plain tables (F32, F16, BF16; cols % 4 == 0, rows 8/16-byte aligned): a block of 128 threads per kTok
//    tokens (kTok = 1 as launched; the kernel takes more). The kTok ids are loaded first (one broadcast load
//    each), then every thread issues all its row loads (kTok x kV units of 4 values: 8 bytes for 16-bit tables,
//    16 for F32; unit u of a row is thread u % 128's), then converts and stores one float4 per unit: a warp's
//    loads and stores are each one contiguous 256/512-byte run. The previous
//    shape (a block of 128 per token, 16-byte chunks, 8 values and two float4 stores 32 bytes apart per thread)
//    reached half the copy bandwidth (docs/perf-log.md).
//  - quantized tables (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, F8_E4M3_B128): a block per token; its threads walk the row's chunks
//    (weight_layout.cuh), decode, and store each run with 16-byte stores.
// An id outside [0, vocab) sets kBadTokenId (reported once per token) and its row is left as is.
#include "backends/cuda/elementwise/embedding.cuh"

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kThreads = 128;       // quantized kernel
constexpr int kPlainThreads = 128;  // plain kernel

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
  // kLoadsAhead chunks per thread are loaded before any is decoded and stored.
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

// 4 consecutive values of a plain table: Raw is what one unit loads.
struct UnitF32 {
  using Raw = uint4;  // 4 f32
  static __device__ __forceinline__ float4 decode(const Raw& r) {
    return make_float4(__uint_as_float(r.x), __uint_as_float(r.y), __uint_as_float(r.z), __uint_as_float(r.w));
  }
};
struct UnitBf16 {
  using Raw = uint2;  // 4 bf16, little-endian pairs
  static __device__ __forceinline__ float4 decode(const Raw& r) {
    return make_float4(__uint_as_float(r.x << 16), __uint_as_float(r.x & 0xFFFF0000u), __uint_as_float(r.y << 16),
                       __uint_as_float(r.y & 0xFFFF0000u));
  }
};
struct UnitF16 {
  using Raw = uint2;  // 4 f16
  static __device__ __forceinline__ float4 decode(const Raw& r) {
    return make_float4(__half2float(__ushort_as_half(uint16_t(r.x & 0xFFFF))), __half2float(__ushort_as_half(uint16_t(r.x >> 16))),
                       __half2float(__ushort_as_half(uint16_t(r.y & 0xFFFF))), __half2float(__ushort_as_half(uint16_t(r.y >> 16))));
  }
};

// Block = tokens [blockIdx.x * kTok, +kTok) of the n; table (vocab, cols) of U::Raw units (cols / 4 per row);
// out (n, cols) f32. kV units per token per thread per pass (columns [c0, c0 + kV * 256) units).
template <class U, int kTok, int kV>
__global__ void __launch_bounds__(kPlainThreads) embedding_plain_kernel(EmbeddingParams p) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t t0 = int64_t(blockIdx.x) * kTok;
  const int64_t units = p.table.cols / 4;  // per row
  const auto* table = reinterpret_cast<const typename U::Raw*>(p.table.data);
  int32_t id[kTok];
  bool ok[kTok];
#pragma unroll
  for (int k = 0; k < kTok; ++k) id[k] = t0 + k < p.n ? p.ids[t0 + k] : 0;
#pragma unroll
  for (int k = 0; k < kTok; ++k) {
    ok[k] = t0 + k < p.n && id[k] >= 0 && id[k] < p.table.rows;
    if (t0 + k < p.n && !ok[k] && threadIdx.x == 0) report_error(p.errors, kBadTokenId, id[k]);
  }
  for (int64_t c0 = threadIdx.x; c0 < units; c0 += int64_t(kPlainThreads) * kV) {
    typename U::Raw raw[kTok][kV];
#pragma unroll
    for (int k = 0; k < kTok; ++k) {
#pragma unroll
      for (int v = 0; v < kV; ++v) {
        const int64_t c = c0 + int64_t(v) * kPlainThreads;
        if (ok[k] && c < units) raw[k][v] = __ldg(table + size_t(id[k]) * size_t(units) + size_t(c));
      }
    }
#pragma unroll
    for (int k = 0; k < kTok; ++k) {
      float4* dst = reinterpret_cast<float4*>(p.out) + size_t(t0 + k) * size_t(units);  // (units) float4
#pragma unroll
      for (int v = 0; v < kV; ++v) {
        const int64_t c = c0 + int64_t(v) * kPlainThreads;
        if (ok[k] && c < units) dst[c] = U::decode(raw[k][v]);
      }
    }
  }
}

template <class U>
void launch_plain(const EmbeddingParams& p, cudaStream_t stream) {
  // kV: 64 bytes of loads per thread (8 units of a 16-bit table, 4 of an F32 one): 8 KB per block of 128 in
  // flight, ~14 blocks per SM.
  constexpr int kV = sizeof(typename U::Raw) == 8 ? 8 : 4;
  launch_pdl(embedding_plain_kernel<U, 1, kV>, dim3(unsigned(p.n)), dim3(kPlainThreads), 0, stream, p);
}

}  // namespace

void embedding(DType ttype, const EmbeddingParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.out) % 16 == 0 && p.table.cols % 4 == 0);
  FERRY_CUDA_REQUIRE(p.n <= 0x7FFFFFFF);
  const uintptr_t data = reinterpret_cast<uintptr_t>(p.table.data);
  if (ttype == DType::F32 && data % 16 == 0) {
    launch_plain<UnitF32>(p, stream);
    FERRY_CUDA_CHECK_LAUNCH(embedding_plain_kernel);
    return;
  }
  if ((ttype == DType::BF16 || ttype == DType::F16) && data % 8 == 0) {
    ttype == DType::BF16 ? launch_plain<UnitBf16>(p, stream) : launch_plain<UnitF16>(p, stream);
    FERRY_CUDA_CHECK_LAUNCH(embedding_plain_kernel);
    return;
  }
  const bool ok = visit_decoder(ttype, [&]<class D>() {
    FERRY_CUDA_REQUIRE(p.table.cols % D::kVals == 0);
    launch_pdl(embedding_kernel<D>, dim3(unsigned(p.n)), dim3(kThreads), 0, stream, p);
    FERRY_CUDA_CHECK_LAUNCH(embedding_kernel);
  });
  FERRY_CUDA_REQUIRE(ok);
}

}  // namespace ferry::cuda_ops
