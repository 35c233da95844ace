// How a prepared weight sits in device memory, and the device-side decoders every kernel that reads
// weights shares (matvec, dequantize-to-bf16, embedding), so the three cannot disagree.
//
// A prepared weight keeps the host Tensor's dtype and shape (rows = product of the outer dims, cols = the
// innermost); Tensor::data points to the start of the layout below. Tensor::row() does NOT apply to the
// repacked types: only this backend's kernels read them.
//
//  F32, F16, BF16: row-major as stored (rows x cols). cols % kValsPerChunk == 0 (4 for F32, 8 for F16/BF16).
//  Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q6_K: repacked, "quants then scales": [rows x nb x split_qbytes] quant bytes
//    (row-major, block after block, in GGUF's order within a block: 32 bytes for Q8_0, 16 for Q4_0/Q4_1/Q5_0/Q5_1,
//    Q6_K's ql[128] then qh[64]), then, starting at scales_offset(), rows x nb records of split_sbytes: fp16 d
//    (Q8_0/Q4_0), fp16 (d, m) (Q4_1), d + qh[4] (Q5_0), (d, m) + qh[4] (Q5_1), Q6_K's int8 scales[16] + fp16 d.
//    Why: the GGUF blocks are 34/18/20/22/24/210 bytes, so a block's quants are not 16-byte aligned; split, every
//    lane reads its quants with 16-byte loads. Same bytes as GGUF (plus < 256 bytes of padding).
//  F8_E4M3_B128 (FP8 checkpoints): split the same way: the 128 e4m3 codes of every block (rows x cols bytes, so
//    row-major as the checkpoint stored them), then the blocks' f32 scales (rows x cols / 128). 1.03 bytes a weight.
//  Q2_K, Q3_K: split too: the quants of every super-block (Q2_K's qs[64]; Q3_K's hmask[32] then qs[64]), then its
//    record: Q2_K's scales[16], fp16 d, fp16 dmin (20 bytes, GGUF's bytes 0..15 and 80..83); Q3_K's scales[12], fp16 d
//    and 2 zero bytes (16, so one 16-byte load). Why: GGUF's 84- and 110-byte blocks are 4- and 2-byte aligned. The
//    file's bytes for Q2_K, 112 / 110 of them for Q3_K (1.8% more), plus < 256 bytes of padding.
//  Q4_K, Q5_K: GGUF's 144- / 176-byte super-blocks, unchanged: 144 = 9 x 16 and 176 = 11 x 16, so rows and blocks
//    stay 16-byte aligned. Matvec kStreamQuant streams Q4_K as stored (a stage of whole rows is one bulk copy; a
//    lane's 8 quant bytes and its super-block's 16-byte header are one LDS.64 and one broadcast LDS.128): no
//    repack, so the register-load matvecs, dequantize and the embedding read the same bytes.
//  Any other type that dequantize_row knows (Q8_1, Q8_K, ...): dequantized to F32 on the host by prepare_weight
//    (exact values, 4 bytes per weight) and prepared as F32: correct, not fast.
//
// Decoding unit: a "chunk" = one 16-byte load of quant data (for Q4_K plus the 16-byte block header),
// giving kRuns runs of kRunLen consecutive values each; run r of chunk c starts at column run_start(c, r).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

#include "backends/cuda/common/bits.cuh"
#include "backends/cuda/common/launch.cuh"  // FERRY_HD

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif
#ifdef __CUDA_ARCH__  // the device pass only: the host compiler warns about an unknown pragma
#define FERRY_UNROLL _Pragma("unroll")
#else
#define FERRY_UNROLL
#endif
#include <cstring>

#include "core/fp16.h"
#include "formats/fp8.h"

namespace ferry::cuda_ops {

inline constexpr int kQBlock = 32;      // values per Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 block
inline constexpr int kKBlock = 256;     // values per K-quant super-block
inline constexpr int kQ4KBytes = 144;   // bytes per Q4_K super-block
inline constexpr int kQ5KBytes = 176;   // bytes per Q5_K super-block
inline constexpr int kF8Vals = 128;     // values per F8_E4M3_B128 block
inline constexpr int kQ2KQBytes = 64;   // quant bytes per Q2_K super-block (qs)
inline constexpr int kQ3KQBytes = 96;   // quant bytes per Q3_K super-block (hmask, qs)
inline constexpr size_t kScalesAlign = 256;

// Weight types the kernels read natively (everything else becomes F32 at prepare time).
inline bool is_native_weight_type(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0: case DType::Q4_1:
    case DType::Q5_0: case DType::Q5_1: case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K:
    case DType::Q6_K: case DType::F8_E4M3_B128: return true;
    default: return false;
  }
}

// The "quants then scales" layouts.
inline constexpr bool is_split_type(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 ||
         t == DType::Q2_K || t == DType::Q3_K || t == DType::Q6_K || t == DType::F8_E4M3_B128;
}
inline constexpr bool is_k_split(DType t) { return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q6_K; }
// Values per block of a split layout.
inline constexpr int split_block_vals(DType t) {
  return is_k_split(t) ? kKBlock : t == DType::F8_E4M3_B128 ? kF8Vals : kQBlock;
}
// Quant bytes per block in the split layouts.
inline constexpr int split_qbytes(DType t) {
  switch (t) {
    case DType::Q8_0: return 32;
    case DType::Q2_K: return kQ2KQBytes;
    case DType::Q3_K: return kQ3KQBytes;
    case DType::Q6_K: return 192;
    case DType::F8_E4M3_B128: return kF8Vals;
    default: return 16;
  }
}
// Scale-record bytes per block in the split layouts: the GGUF block's other bytes, in order, then zeros (Q3_K's 2).
inline constexpr int split_sbytes(DType t) {
  switch (t) {
    case DType::Q4_1: return 4;
    case DType::Q5_0: return 6;
    case DType::Q5_1: return 8;
    case DType::Q2_K: return 20;
    case DType::Q3_K: return 16;
    case DType::Q6_K: return 18;
    case DType::F8_E4M3_B128: return 4;
    default: return 2;
  }
}
// Byte offset of the quants within a GGUF block of a split type (the record is the bytes before and after them).
inline constexpr int split_quants_at(DType t) {
  switch (t) {
    case DType::Q3_K: case DType::Q6_K: case DType::F8_E4M3_B128: return 0;
    case DType::Q2_K: return 16;  // after scales[16]; d, dmin follow the quants
    default: return split_sbytes(t);  // the 32-value types: the record (d [, m] [, qh]) first
  }
}
// Byte offset of the scales region of a split-layout weight of rows x cols.
inline size_t scales_offset(DType t, int64_t rows, int64_t cols) {
  const size_t q = size_t(rows) * size_t(cols / split_block_vals(t)) * size_t(split_qbytes(t));
  return (q + kScalesAlign - 1) / kScalesAlign * kScalesAlign;
}
// Total device bytes of a prepared weight of a native type.
inline size_t prepared_bytes(DType t, int64_t rows, int64_t cols) {
  if (is_split_type(t))
    return scales_offset(t, rows, cols) + size_t(rows) * size_t(cols / split_block_vals(t)) * size_t(split_sbytes(t));
  return size_t(rows) * row_bytes(t, cols);
}

// A prepared weight as the kernels see it.
struct WeightView {
  const uint8_t* data;  // start of the layout above
  int64_t rows, cols;
  size_t scales;        // byte offset of the scales region (split layouts only)
};

// How a streamed matvec's producer (the streamed matvecs) issues the weight's bulk copies. Same bits
// either way.
struct WeightStream {
  // At most this many ring stages in flight (issued, not yet landed); 0: no cap (a stage whenever a slot is free).
  int ring_inflight = 0;
  // The copies carry an L2 evict_first policy: each weight byte is read once a step, so its lines go before the
  // lines that latency-bound loads read again (the KV cache, activations, norm weights, kernel code). Without it a
  // decode step streams the whole model (4.6-16 GB) through the 60 MB L2 and every such load goes to DRAM.
  bool evict_first = false;
};

// The decoders below compile for the device (nvcc) and for the host (any compiler), so the host-only test
// tests/cuda/weight_layout_test.cpp checks the layouts against dequantize_row on machines without a GPU.
#ifndef __CUDACC__
struct uint4 {
  uint32_t x, y, z, w;
};
#endif

FERRY_HD inline uint4 load16(const void* p) {
#ifdef __CUDA_ARCH__
  return __ldg(static_cast<const uint4*>(p));
#else
  uint4 v;
  std::memcpy(&v, p, 16);
  return v;
#endif
}
template <typename T>
FERRY_HD inline T load_scalar(const T* p) {
#ifdef __CUDA_ARCH__
  return __ldg(p);
#else
  return *p;
#endif
}
FERRY_HD inline float half_bits_to_float(uint16_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(h));
#else
  return fp16_to_f32(h);
#endif
}
FERRY_HD inline float bf16_bits_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }
FERRY_HD inline uint8_t byte_of(const uint4& v, int i) {
  const uint32_t w = i < 4 ? v.x : i < 8 ? v.y : i < 12 ? v.z : v.w;
  return uint8_t(w >> (8 * (i & 3)));
}

// Each decoder: kVals values per chunk in kRuns runs of kRunLen; Raw = what one chunk loads;
// load(w, row, c) issues the loads; decode(raw, v) turns them into floats (v[r * kRunLen + j] is column
// run_start(c, r) + j).
struct DecodeF32 {
  static constexpr int kRuns = 1, kRunLen = 4, kVals = 4;
  struct Raw { uint4 q; };
  FERRY_HD static inline int64_t chunks(int64_t cols) { return cols / 4; }
  FERRY_HD static inline int64_t run_start(int64_t c, int r) { return c * 4; }
  FERRY_HD static inline Raw load(const WeightView& w, int64_t row, int64_t c) {
    return {load16(w.data + (size_t(row) * w.cols + size_t(c) * 4) * 4)};
  }
  FERRY_HD static inline void decode(const Raw& r, float* v) {
    v[0] = bits_to_float(r.q.x); v[1] = bits_to_float(r.q.y);
    v[2] = bits_to_float(r.q.z); v[3] = bits_to_float(r.q.w);
  }
};

template <bool kBf16>
struct DecodeHalf {  // F16 (kBf16 = false) or BF16
  static constexpr int kRuns = 1, kRunLen = 8, kVals = 8;
  struct Raw { uint4 q; };
  FERRY_HD static inline int64_t chunks(int64_t cols) { return cols / 8; }
  FERRY_HD static inline int64_t run_start(int64_t c, int r) { return c * 8; }
  FERRY_HD static inline Raw load(const WeightView& w, int64_t row, int64_t c) {
    return {load16(w.data + (size_t(row) * w.cols + size_t(c) * 8) * 2)};
  }
  FERRY_HD static inline void decode(const Raw& r, float* v) {
    const uint32_t u[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      const uint16_t lo = uint16_t(u[i] & 0xFFFF), hi = uint16_t(u[i] >> 16);
      v[2 * i] = kBf16 ? bf16_bits_to_float(lo) : half_bits_to_float(lo);
      v[2 * i + 1] = kBf16 ? bf16_bits_to_float(hi) : half_bits_to_float(hi);
    }
  }
};

// Q8_0 split: a chunk is half a block (16 int8 quants), scale d of block c / 2.
struct DecodeQ8_0 {
  static constexpr int kRuns = 1, kRunLen = 16, kVals = 16;
  struct Raw { uint4 q; uint16_t d; };
  FERRY_HD static inline int64_t chunks(int64_t cols) { return cols / 16; }
  FERRY_HD static inline int64_t run_start(int64_t c, int r) { return c * 16; }
  FERRY_HD static inline Raw load(const WeightView& w, int64_t row, int64_t c) {
    const int64_t nb = w.cols / kQBlock;
    const int64_t block = row * nb + c / 2;
    Raw r;
    r.q = load16(w.data + size_t(row) * size_t(w.cols) + size_t(c) * 16);
    r.d = load_scalar(reinterpret_cast<const uint16_t*>(w.data + w.scales) + block);
    return r;
  }
  FERRY_HD static inline void decode(const Raw& r, float* v) {
    const float d = half_bits_to_float(r.d);
FERRY_UNROLL
    for (int i = 0; i < 16; ++i) v[i] = d * float(int8_t(byte_of(r.q, i)));
  }
};

// Q4_0 / Q4_1 split: a chunk is one block's 16 quant bytes; run 0 = low nibbles (values 0..15),
// run 1 = high nibbles (values 16..31).
template <bool kHasMin>
struct DecodeQ4 {
  static constexpr int kRuns = 2, kRunLen = 16, kVals = 32;
  struct Raw { uint4 q; uint32_t s; };  // s: d (Q4_0), or d | m << 16 (Q4_1)
  FERRY_HD static inline int64_t chunks(int64_t cols) { return cols / 32; }
  FERRY_HD static inline int64_t run_start(int64_t c, int r) { return c * 32 + r * 16; }
  FERRY_HD static inline Raw load(const WeightView& w, int64_t row, int64_t c) {
    const int64_t nb = w.cols / kQBlock;
    const int64_t block = row * nb + c;
    Raw r;
    r.q = load16(w.data + size_t(block) * 16);
    if constexpr (kHasMin) {
      r.s = load_scalar(reinterpret_cast<const uint32_t*>(w.data + w.scales) + block);
    } else {
      r.s = load_scalar(reinterpret_cast<const uint16_t*>(w.data + w.scales) + block);
    }
    return r;
  }
  FERRY_HD static inline void decode(const Raw& r, float* v) {
    const float d = half_bits_to_float(uint16_t(r.s & 0xFFFF));
    const float m = kHasMin ? half_bits_to_float(uint16_t(r.s >> 16)) : -8.0f * d;
FERRY_UNROLL
    for (int i = 0; i < 16; ++i) {
      const uint8_t b = byte_of(r.q, i);
      v[i] = fmaf(d, float(b & 0xF), m);
      v[16 + i] = fmaf(d, float(b >> 4), m);
    }
  }
};

// Q4_K's 6-bit scales and mins (ggml's get_scale_min_k4 over the 12 scale bytes, header bytes 4..15): Q4_K, Q5_K.
FERRY_HD inline void k_scale_min(const uint4& head, int j, float* sc, float* mn) {
  const auto sb = [&](int i) { return int(byte_of(head, 4 + i)); };
  if (j < 4) {
    *sc = float(sb(j) & 63);
    *mn = float(sb(j + 4) & 63);
  } else {
    *sc = float((sb(j + 4) & 0xF) | ((sb(j - 4) >> 6) << 4));
    *mn = float((sb(j + 4) >> 4) | ((sb(j) >> 6) << 4));
  }
}

// Q4_K (GGUF blocks): chunk c = (super-block c / 8, k = c % 8); with c64 = k / 2, h = k % 2 it reads quant
// bytes 32 c64 + 16 h .. +15; low nibbles are values 64 c64 + 16 h + j (group 2 c64), high nibbles values
// 64 c64 + 32 + 16 h + j (group 2 c64 + 1).
struct DecodeQ4K {
  static constexpr int kRuns = 2, kRunLen = 16, kVals = 32;
  struct Raw { uint4 head; uint4 q; int k; };
  FERRY_HD static inline int64_t chunks(int64_t cols) { return cols / 32; }
  FERRY_HD static inline int64_t run_start(int64_t c, int r) {
    const int k = int(c % 8);
    return (c / 8) * kKBlock + 64 * (k / 2) + 16 * (k % 2) + 32 * r;
  }
  FERRY_HD static inline Raw load(const WeightView& w, int64_t row, int64_t c) {
    const uint8_t* block = w.data + (size_t(row) * size_t(w.cols / kKBlock) + size_t(c / 8)) * kQ4KBytes;
    const int k = int(c % 8);
    Raw r;
    r.head = load16(block);
    r.q = load16(block + 16 + 32 * (k / 2) + 16 * (k % 2));
    r.k = k;
    return r;
  }
  FERRY_HD static inline void decode(const Raw& r, float* v) {
    const float d = half_bits_to_float(uint16_t(r.head.x & 0xFFFF));
    const float dmin = half_bits_to_float(uint16_t(r.head.x >> 16));
    const int g = 2 * (r.k / 2);
    float sc0, mn0, sc1, mn1;
    k_scale_min(r.head, g, &sc0, &mn0);
    k_scale_min(r.head, g + 1, &sc1, &mn1);
    const float d0 = d * sc0, m0 = dmin * mn0, d1 = d * sc1, m1 = dmin * mn1;
FERRY_UNROLL
    for (int i = 0; i < 16; ++i) {
      const uint8_t b = byte_of(r.q, i);
      v[i] = d0 * float(b & 0xF) - m0;
      v[16 + i] = d1 * float(b >> 4) - m1;
    }
  }
};

// Q5_0 / Q5_1 split: a chunk is one block's 16 quant bytes and its record (d [, m], qh); run 0 = values 0..15
// (low nibbles, high bit j of qh), run 1 = values 16..31 (high nibbles, high bit 16 + j).
template <bool kHasMin>
struct DecodeQ5 {
  static constexpr int kRuns = 2, kRunLen = 16, kVals = 32;
  struct Raw { uint4 q; uint32_t s; uint32_t qh; };  // s: d (Q5_0), or d | m << 16 (Q5_1)
  FERRY_HD static inline int64_t chunks(int64_t cols) { return cols / 32; }
  FERRY_HD static inline int64_t run_start(int64_t c, int r) { return c * 32 + r * 16; }
  FERRY_HD static inline Raw load(const WeightView& w, int64_t row, int64_t c) {
    const int64_t block = row * (w.cols / kQBlock) + c;
    Raw r;
    r.q = load16(w.data + size_t(block) * 16);
    if constexpr (kHasMin) {  // 8-byte records: (d, m), qh
      const uint32_t* rec = reinterpret_cast<const uint32_t*>(w.data + w.scales) + 2 * block;
      r.s = load_scalar(rec);
      r.qh = load_scalar(rec + 1);
    } else {  // 6-byte records: d, qh as two halves
      const uint16_t* rec = reinterpret_cast<const uint16_t*>(w.data + w.scales) + 3 * block;
      r.s = load_scalar(rec);
      r.qh = uint32_t(load_scalar(rec + 1)) | uint32_t(load_scalar(rec + 2)) << 16;
    }
    return r;
  }
  FERRY_HD static inline void decode(const Raw& r, float* v) {
    const float d = half_bits_to_float(uint16_t(r.s & 0xFFFF));
    const float m = kHasMin ? half_bits_to_float(uint16_t(r.s >> 16)) : -16.0f * d;
FERRY_UNROLL
    for (int i = 0; i < 16; ++i) {
      const uint8_t b = byte_of(r.q, i);
      v[i] = fmaf(d, float((b & 0xF) | (((r.qh >> i) & 1) << 4)), m);
      v[16 + i] = fmaf(d, float((b >> 4) | (((r.qh >> (16 + i)) & 1) << 4)), m);
    }
  }
};

// Q5_K (GGUF blocks: 16-byte header as Q4_K's, qh[32], qs[128]): chunk c = (super-block c / 8, k = c % 8); with
// c64 = k / 2, h = k % 2 it reads quant bytes 32 c64 + 16 h .. +15 and qh bytes 16 h .. +15; low nibbles are values
// 64 c64 + 16 h + j (group 2 c64, high bit 2 c64 of qh[16 h + j]), high nibbles values 64 c64 + 32 + 16 h + j
// (group 2 c64 + 1, high bit 2 c64 + 1).
struct DecodeQ5K {
  static constexpr int kRuns = 2, kRunLen = 16, kVals = 32;
  struct Raw { uint4 head; uint4 q; uint4 qh; int k; };
  FERRY_HD static inline int64_t chunks(int64_t cols) { return cols / 32; }
  FERRY_HD static inline int64_t run_start(int64_t c, int r) {
    const int k = int(c % 8);
    return (c / 8) * kKBlock + 64 * (k / 2) + 16 * (k % 2) + 32 * r;
  }
  FERRY_HD static inline Raw load(const WeightView& w, int64_t row, int64_t c) {
    const uint8_t* block = w.data + (size_t(row) * size_t(w.cols / kKBlock) + size_t(c / 8)) * kQ5KBytes;
    const int k = int(c % 8);
    Raw r;
    r.head = load16(block);
    r.qh = load16(block + 16 + 16 * (k % 2));
    r.q = load16(block + 48 + 32 * (k / 2) + 16 * (k % 2));
    r.k = k;
    return r;
  }
  FERRY_HD static inline void decode(const Raw& r, float* v) {
    const float d = half_bits_to_float(uint16_t(r.head.x & 0xFFFF));
    const float dmin = half_bits_to_float(uint16_t(r.head.x >> 16));
    const int g = 2 * (r.k / 2);
    float sc0, mn0, sc1, mn1;
    k_scale_min(r.head, g, &sc0, &mn0);
    k_scale_min(r.head, g + 1, &sc1, &mn1);
    const float d0 = d * sc0, m0 = dmin * mn0, d1 = d * sc1, m1 = dmin * mn1;
FERRY_UNROLL
    for (int i = 0; i < 16; ++i) {
      const uint8_t b = byte_of(r.q, i), h = byte_of(r.qh, i);
      v[i] = d0 * float((b & 0xF) | (((h >> g) & 1) << 4)) - m0;
      v[16 + i] = d1 * float((b >> 4) | (((h >> (g + 1)) & 1) << 4)) - m1;
    }
  }
};

// Q6_K split (per super-block: ql[128] qh[64] quants; int8 scales[16], fp16 d record): chunk c = (super-block
// c / 4, k = c % 4); with half n = k / 2 and l0 = 16 (k % 2) it reads ql bytes 64 n + l0 .. +15 (a) and
// 64 n + 32 + l0 .. +15 (b) and qh bytes 32 n + l0 .. +15; run r is values 128 n + l0 + 32 r + j: the low nibbles
// of a (r 0) and b (r 1), the high nibbles of a (r 2) and b (r 3), each with qh bits 2r..2r+1 above them, minus 32,
// times d and scale 8 n + k % 2 + 2 r.
struct DecodeQ6K {
  static constexpr int kRuns = 4, kRunLen = 16, kVals = 64;
  struct Raw { uint4 a; uint4 b; uint4 h; uint32_t sc; uint16_t d; int k; };  // sc: the 4 runs' int8 scales
  FERRY_HD static inline int64_t chunks(int64_t cols) { return cols / 64; }
  FERRY_HD static inline int64_t run_start(int64_t c, int r) {
    const int k = int(c % 4);
    return (c / 4) * kKBlock + 128 * (k / 2) + 16 * (k % 2) + 32 * r;
  }
  FERRY_HD static inline Raw load(const WeightView& w, int64_t row, int64_t c) {
    const int64_t block = row * (w.cols / kKBlock) + c / 4;
    const int k = int(c % 4), n = k / 2, l0 = 16 * (k % 2);
    const uint8_t* q = w.data + size_t(block) * 192;
    const uint8_t* rec = w.data + w.scales + size_t(block) * 18;
    Raw r;
    r.a = load16(q + 64 * n + l0);
    r.b = load16(q + 64 * n + 32 + l0);
    r.h = load16(q + 128 + 32 * n + l0);
    const int s0 = 8 * n + k % 2;
    r.sc = uint32_t(load_scalar(rec + s0)) | uint32_t(load_scalar(rec + s0 + 2)) << 8 |
           uint32_t(load_scalar(rec + s0 + 4)) << 16 | uint32_t(load_scalar(rec + s0 + 6)) << 24;
    r.d = load_scalar(reinterpret_cast<const uint16_t*>(rec + 16));
    r.k = k;
    return r;
  }
  FERRY_HD static inline void decode(const Raw& r, float* v) {
    const float d = half_bits_to_float(r.d);
    float ds[4];
FERRY_UNROLL
    for (int q = 0; q < 4; ++q) ds[q] = d * float(int8_t(uint8_t(r.sc >> (8 * q))));
FERRY_UNROLL
    for (int i = 0; i < 16; ++i) {
      const int a = byte_of(r.a, i), b = byte_of(r.b, i), h = byte_of(r.h, i);
      v[i] = ds[0] * float(((a & 0xF) | ((h & 3) << 4)) - 32);
      v[16 + i] = ds[1] * float(((b & 0xF) | (((h >> 2) & 3) << 4)) - 32);
      v[32 + i] = ds[2] * float(((a >> 4) | (((h >> 4) & 3) << 4)) - 32);
      v[48 + i] = ds[3] * float(((b >> 4) | (((h >> 6) & 3) << 4)) - 32);
    }
  }
};

// Q2_K split (per super-block: qs[64] quants; scales[16], fp16 d, fp16 dmin record): chunk c = (super-block c / 4,
// k = c % 4); with half h = k / 2 and p = k % 2 it reads qs bytes 32 h + 16 p .. +15; run r is bits 2r..2r+1 of
// each byte: values 128 h + 32 r + 16 p + j, group g = 8 h + 2 r + p: d (scales[g] & 0xF) q - dmin (scales[g] >> 4),
// the product rounded before the subtraction as dequantize_row does.
struct DecodeQ2K {
  static constexpr int kRuns = 4, kRunLen = 16, kVals = 64;
  // s0, s1: record words 2h, 2h + 1 (scales 8h .. 8h + 7); dd: d | dmin << 16
  struct Raw { uint4 q; uint32_t s0, s1, dd; int k; };
  FERRY_HD static inline int64_t chunks(int64_t cols) { return cols / 64; }
  FERRY_HD static inline int64_t run_start(int64_t c, int r) {
    const int k = int(c % 4);
    return (c / 4) * kKBlock + 128 * (k / 2) + 16 * (k % 2) + 32 * r;
  }
  FERRY_HD static inline Raw load(const WeightView& w, int64_t row, int64_t c) {
    const int64_t block = row * (w.cols / kKBlock) + c / 4;
    const int k = int(c % 4), h = k / 2;
    const auto* rec = reinterpret_cast<const uint32_t*>(w.data + w.scales + size_t(block) * 20);
    Raw r;
    r.q = load16(w.data + size_t(block) * kQ2KQBytes + 32 * h + 16 * (k % 2));
    r.s0 = load_scalar(rec + 2 * h);
    r.s1 = load_scalar(rec + 2 * h + 1);
    r.dd = load_scalar(rec + 4);
    r.k = k;
    return r;
  }
  // Group scale byte of run r: byte 2 (r % 2) + p of s0 (r < 2) or s1.
  FERRY_HD static inline uint32_t scale_byte(const Raw& w, int r) {
    return ((r < 2 ? w.s0 : w.s1) >> (8 * (2 * (r % 2) + w.k % 2))) & 0xFF;
  }
  FERRY_HD static inline void decode(const Raw& w, float* v) {
    const float d = half_bits_to_float(uint16_t(w.dd & 0xFFFF));
    const float dmin = half_bits_to_float(uint16_t(w.dd >> 16));
FERRY_UNROLL
    for (int r = 0; r < 4; ++r) {
      const uint32_t sc = scale_byte(w, r);
      const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
FERRY_UNROLL
      for (int i = 0; i < 16; ++i) v[16 * r + i] = mul_rn(dl, float((byte_of(w.q, i) >> (2 * r)) & 3)) - ml;
    }
  }
};

// Q3_K split (per super-block: hmask[32] qs[64] quants; scales[12], fp16 d, 2 zero bytes record): chunk c =
// (super-block c / 4, k = c % 4); with half h = k / 2 and p = k % 2 it reads hmask bytes 16 p .. +15 and qs bytes
// 32 h + 16 p .. +15; run r is values 128 h + 32 r + 16 p + j, group g = 8 h + 2 r + p: (q2 - (hmask bit 4 h + r set
// ? 0 : 4)) times d (scale6[g] - 32), q2 = bits 2r..2r+1 of the qs byte.
struct DecodeQ3K {
  static constexpr int kRuns = 4, kRunLen = 16, kVals = 64;
  struct Raw { uint4 hm; uint4 q; uint4 rec; int k; };
  FERRY_HD static inline int64_t chunks(int64_t cols) { return cols / 64; }
  FERRY_HD static inline int64_t run_start(int64_t c, int r) {
    const int k = int(c % 4);
    return (c / 4) * kKBlock + 128 * (k / 2) + 16 * (k % 2) + 32 * r;
  }
  FERRY_HD static inline Raw load(const WeightView& w, int64_t row, int64_t c) {
    const int64_t block = row * (w.cols / kKBlock) + c / 4;
    const int k = int(c % 4), h = k / 2, p = k % 2;
    const uint8_t* q = w.data + size_t(block) * kQ3KQBytes;
    Raw r;
    r.hm = load16(q + 16 * p);
    r.q = load16(q + 32 + 32 * h + 16 * p);
    r.rec = load16(w.data + w.scales + size_t(block) * 16);
    r.k = k;
    return r;
  }
  // The signed 6-bit scale of run r's group g = 8 h + 2 r + p (quant.h's q3k_scales).
  FERRY_HD static inline int scale(const Raw& w, int r) {
    const int h = w.k / 2, p = w.k % 2, gl = 2 * r + p;  // g - 8 h
    const int low = (byte_of(w.rec, gl) >> (4 * h)) & 0xF;
    const int high = (byte_of(w.rec, 8 + gl % 4) >> (2 * (2 * h + r / 2))) & 3;  // g % 4 = gl % 4, g / 4 = 2 h + r / 2
    return (low | (high << 4)) - 32;
  }
  FERRY_HD static inline void decode(const Raw& w, float* v) {
    const float d = half_bits_to_float(uint16_t(w.rec.w & 0xFFFF));
    const int hb = 4 * (w.k / 2);
FERRY_UNROLL
    for (int r = 0; r < 4; ++r) {
      const float dl = d * float(scale(w, r));
FERRY_UNROLL
      for (int i = 0; i < 16; ++i) {
        const int q = int((byte_of(w.q, i) >> (2 * r)) & 3) - (((byte_of(w.hm, i) >> (hb + r)) & 1) ? 0 : 4);
        v[16 * r + i] = dl * float(q);
      }
    }
  }
};

// Two e4m3 codes (the low and high byte of `pair`) as floats, exactly: on the device through f16x2
// (cvt.rn.f16x2.e4m3x2 on sm_89+; every e4m3 value, NaN included, is an f16 value), on the host formats/fp8.h.
FERRY_HD inline void e4m3x2_to_float(uint16_t pair, float* v) {
#ifdef __CUDA_ARCH__
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(pair), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  v[0] = f.x;
  v[1] = f.y;
#else
  v[0] = fp8_e4m3_to_f32(uint8_t(pair & 0xFF));
  v[1] = fp8_e4m3_to_f32(uint8_t(pair >> 8));
#endif
}

// F8_E4M3_B128 split: a chunk is 16 e4m3 codes (an eighth of a block), times the f32 scale of block c / 8: the
// f32 product e4m3 * scale, as dequantize_row computes it.
struct DecodeF8 {
  static constexpr int kRuns = 1, kRunLen = 16, kVals = 16;
  struct Raw { uint4 q; float d; };
  FERRY_HD static inline int64_t chunks(int64_t cols) { return cols / 16; }
  FERRY_HD static inline int64_t run_start(int64_t c, int r) { return c * 16; }
  FERRY_HD static inline Raw load(const WeightView& w, int64_t row, int64_t c) {
    const int64_t block = row * (w.cols / kF8Vals) + c / (kF8Vals / 16);
    Raw r;
    r.q = load16(w.data + size_t(row) * size_t(w.cols) + size_t(c) * 16);
    r.d = load_scalar(reinterpret_cast<const float*>(w.data + w.scales) + block);
    return r;
  }
  FERRY_HD static inline void decode(const Raw& r, float* v) {
    const uint32_t u[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      e4m3x2_to_float(uint16_t(u[i] & 0xFFFF), v + 4 * i);
      e4m3x2_to_float(uint16_t(u[i] >> 16), v + 4 * i + 2);
    }
FERRY_UNROLL
    for (int i = 0; i < 16; ++i) v[i] *= r.d;
  }
};

// Calls f.template operator()<Decoder>() for the decoder of t (a native type); returns false otherwise.
template <class F>
bool visit_decoder(DType t, F&& f) {
  switch (t) {
    case DType::F32: f.template operator()<DecodeF32>(); return true;
    case DType::F16: f.template operator()<DecodeHalf<false>>(); return true;
    case DType::BF16: f.template operator()<DecodeHalf<true>>(); return true;
    case DType::Q8_0: f.template operator()<DecodeQ8_0>(); return true;
    case DType::Q4_0: f.template operator()<DecodeQ4<false>>(); return true;
    case DType::Q4_1: f.template operator()<DecodeQ4<true>>(); return true;
    case DType::Q5_0: f.template operator()<DecodeQ5<false>>(); return true;
    case DType::Q5_1: f.template operator()<DecodeQ5<true>>(); return true;
    case DType::Q2_K: f.template operator()<DecodeQ2K>(); return true;
    case DType::Q3_K: f.template operator()<DecodeQ3K>(); return true;
    case DType::Q4_K: f.template operator()<DecodeQ4K>(); return true;
    case DType::Q5_K: f.template operator()<DecodeQ5K>(); return true;
    case DType::Q6_K: f.template operator()<DecodeQ6K>(); return true;
    case DType::F8_E4M3_B128: f.template operator()<DecodeF8>(); return true;
    default: return false;
  }
}

}  // namespace ferry::cuda_ops
