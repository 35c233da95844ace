// ferry's own prefill GEMM for Hopper (sm_90a): out (m, n) f32 row-major = x (m, k) bf16 row-major .
// w (n, k) bf16 row-major^T ("TN", fp32 accumulation).
//
// Kernel (gemm_sm90.cu): persistent (one block per SM, tiles walked in the order of gemm_heuristics.h),
// warp-specialized: warpgroup 0 is the producer (one thread issues TMA loads of 128B-swizzled 128 x 64
// tiles of x and block_n x 64 tiles of w into a ring of shared-memory stages, full/empty mbarriers),
// warpgroups 1 and 2 are consumers (rows 0..63 and 64..127 of the 128 x block_n output tile, wgmma
// m64n{block_n}k16 from shared memory, accumulators in registers; setmaxnreg moves registers from the
// producer to them); the epilogue stores the f32 accumulators straight from registers (8-byte stores,
// rows >= m and columns >= n skipped). Rows of x beyond m and columns beyond k arrive as zeros (TMA).
// Stream-K plans (gemm_heuristics.h; shapes whose whole tiles leave half the SMs idle): the blocks take equal shares of the
// (tile, k step) walk; a tile cut between blocks is summed in k order by the block holding its k = 0 share, from
// partials the others leave in a workspace this object owns. Deterministic: the bits depend on (m, n, k, plan) only.
//
// Host-compilable: no device code here, so cuda_backend.cpp can include it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/matmul/gemm_heuristics.h"

namespace ferry::cuda_ops {

class Sm90Gemm {
 public:
  // Reads the device's SM count and compute capability; finds cuTensorMapEncodeTiled through the runtime's
  // driver entry point (no libcuda link). available() is false on anything but compute capability 9.x or
  // when the entry point is missing; run() must not be called then. pdl: launch with programmatic stream
  // serialization (the first weight boxes are read before the previous kernel ends; gemm_sm90.cu), an option
  // until measured (FERRY_CUDA_TUNE=gemm=pdl).
  // Allocates the stream-K workspace on `device` (num_sms x 128 KB of partials and num_sms x 2 flags); run() then
  // allocates nothing. run() calls of one object must be ordered on one stream (they share the workspace).
  explicit Sm90Gemm(int device, bool pdl = false);
  ~Sm90Gemm();
  Sm90Gemm(const Sm90Gemm&) = delete;
  Sm90Gemm& operator=(const Sm90Gemm&) = delete;

  bool available() const { return encode_ != nullptr; }
  int num_sms() const { return num_sms_; }

  // Shapes the kernel takes: k a multiple of 8 (16-byte row pitch for TMA), n even (8-byte stores),
  // m, n, k >= 1 and below 2^31. The pointers must be 16-byte aligned (x, w) and 8-byte aligned (out).
  static bool supports(int64_t m, int64_t n, int64_t k);

  // out: (m, n) f32 row-major; x: (m, k) bf16 bits row-major; w: (n, k) bf16 bits row-major. On `stream`.
  // force: that tile shape over whole tiles instead of the heuristic's plan (batch-invariant mode, tests,
  // benchmarks); force_units > 0 with force: stream-K with that tile over min(force_units, SMs, tiles x k steps)
  // blocks (tests, benchmarks).
  void run(float* out, const uint16_t* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, cudaStream_t stream,
           const GemmTile* force = nullptr, int force_units = 0) const;
  // The plan run() would launch with these arguments.
  GemmPlan plan(int64_t m, int64_t n, int64_t k, const GemmTile* force = nullptr, int force_units = 0) const;

  // SwiGLU fused into the epilogue (CudaBackend::matmul_swiglu in prefill): out (m, hidden) f32 =
  // silu(x . w[:hidden]^T) * (x . w[hidden:]^T); w: (2 hidden, k) bf16 bits, the rows of w_gate then those of
  // w_up (a TP shard keeps that shape). An output tile of block_n/2 units reads gate rows [j0, j0 + block_n/2) and
  // up rows [hidden + j0, ...) as two TMA boxes (no repack), so it does the unfused tile's math and writes half
  // its columns; no (m, 2 hidden) intermediate. Same accumulation order per element as run() with the same tile.
  // Takes: supports(m, 2 hidden, k) and hidden even (8-byte stores). Tile: the heuristic's for (m, 2 hidden).
  static bool supports_swiglu(int64_t m, int64_t hidden, int64_t k);
  static GemmPlan swiglu_plan(int64_t m, int64_t hidden, int num_sms, const GemmTile* force = nullptr);
  void run_swiglu(float* out, const uint16_t* x, const uint16_t* w, int64_t m, int64_t hidden, int64_t k,
                  cudaStream_t stream, const GemmTile* force = nullptr) const;
  // The same with out (m, hidden) bf16 bits, each value rounded to nearest even from the f32 run_swiglu writes (so
  // bit-identical to run_swiglu then f32_to_bf16): the down projection's GEMM input without a conversion pass.
  void run_swiglu_bf16(uint16_t* out, const uint16_t* x, const uint16_t* w, int64_t m, int64_t hidden, int64_t k,
                       cudaStream_t stream, const GemmTile* force = nullptr) const;

 private:
  void swiglu_any(void* out, bool out_bf16, const uint16_t* x, const uint16_t* w, int64_t m, int64_t hidden, int64_t k,
                  cudaStream_t stream, const GemmTile* force) const;

  void* encode_ = nullptr;  // PFN_cuTensorMapEncodeTiled
  int num_sms_ = 0;
  bool pdl_ = false;
  int device_ = 0;
  float* partial_ = nullptr;  // (num_sms, 2, 64 x 256) f32: stream-K partials, one slot per block and consumer
  int* flags_ = nullptr;      // (num_sms, 2): a slot's partial is written; zero between launches
};

}  // namespace ferry::cuda_ops
