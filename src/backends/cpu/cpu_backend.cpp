#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>
#include <unistd.h>

#include "backends/cpu/attention.h"
#include "backends/cpu/q4_1x8.h"
#include "formats/quant.h"

namespace ferry {

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : options_(options), pool_(options.n_threads),
      dot_(select_dot_kernels(options.simd)),
      vec_(select_vec_kernels(options.simd)) {}

std::string CpuBackend::name() const {
  return options_.kernels == CpuKernels::Reference ? "cpu-reference" : "cpu-fast";
}

std::vector<std::pair<std::string, std::string>> CpuBackend::facts() const {
  if (options_.kernels == CpuKernels::Reference)
    return {{"cpu.matmul", "reference: plain float loops, weights dequantized row by row (prefill and decode alike)"}};
  std::string v = fmt::format("fast at {}: activations quantized once per matmul to the weights' partner format "
                              "(Q8_0G4 / Q8_1G4, Q8_K for K-quants, bf16 or f32 for float weights), tiles of up to 4 "
                              "weight rows x 4 tokens (prefill and decode alike)",
                              simd_level_name(options_.simd));
  size_t repacked = 0;
  {
    std::lock_guard<std::mutex> lock(repacked_q4_1_->mutex);
    repacked = repacked_q4_1_->ptrs.size();
  }
  if (repacked > 0) v += fmt::format("; {} Q4_0/Q4_1 weights repacked to 8-row blocks for VNNI", repacked);
  return {{"cpu.matmul", v}};
}

DeviceBuffer CpuBackend::alloc(size_t bytes) {
  const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, rounded);
  FERRY_CHECK(p != nullptr, "out of host memory allocating {} bytes", bytes);
  return DeviceBuffer(p, bytes, Device::Cpu, [](void* q) { std::free(q); });
}

namespace {

// Asks the kernel to drop the whole pages of [p, p + bytes) from this process's memory (MADV_PAGEOUT: the
// contents stay valid, a later read brings them back): the mmap'd original of a repacked weight would
// otherwise stay resident next to its copy. Best effort; nothing happens where the call is unsupported.
void release_pages(const void* p, size_t bytes) {
#if defined(MADV_PAGEOUT)
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (uintptr_t(p) + page - 1) / page * page, hi = (uintptr_t(p) + bytes) / page * page;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_PAGEOUT);
#else
  (void)p, (void)bytes;
#endif
}

}  // namespace

Tensor CpuBackend::prepare_weight(const Tensor& host, std::vector<DeviceBuffer>& keep) {
  // Q4_1 / Q4_0 at the AVX-512 level: repacked 8 rows per block (q4_1x8.h: +58% Q4_1 prompt matmul); everything
  // else is used in place from the mmap.
  const bool repack = options_.kernels == CpuKernels::Fast && options_.simd == SimdLevel::Avx512 &&
                      q4_x8_type(host.dtype) && host.n_dims == 2 && host.cols() % kQK == 0 &&
                      host.rows() > 0 && q4_1x8_supported();
  if (!repack) return host;
  const int64_t n_out = host.rows(), n_in = host.cols();
  const size_t bytes = q4_1x8_bytes(n_out, n_in);  // (ceil(n_out / 8), n_in / 32) BlockQ4_1x8
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  FERRY_CHECK(p != nullptr, "out of host memory allocating {} bytes", bytes);
  // row groups repacked in parallel (an 8B model holds ~4.5 GB of them): rows [8 g0, 8 g1) are a
  // contiguous sub-matrix whose repacked form starts at block g0 * nb
  const int64_t groups = (n_out + kQ41x8Rows - 1) / kQ41x8Rows, nb = n_in / kQK;
  std::atomic<bool> ok{true};
  pool_.parallel_for(groups, 16, [&](int64_t g0, int64_t g1) {
    const int64_t r0 = g0 * kQ41x8Rows, r1 = std::min(n_out, g1 * kQ41x8Rows);
    if (!repack_q4_1x8(host.dtype, static_cast<const char*>(host.data) + size_t(r0) * host.row_bytes(), r1 - r0,
                       n_in, static_cast<BlockQ4_1x8*>(p) + g0 * nb))
      ok = false;
  });
  if (!ok) {
    std::free(p);  // a Q4_0 scale too large for the m = -8 d form: the row-major kernels take it
    return host;
  }
  {
    std::lock_guard<std::mutex> lock(repacked_q4_1_->mutex);
    repacked_q4_1_->ptrs.insert(p);
  }
  // the release function unregisters the pointer before the memory goes back to the allocator
  DeviceBuffer buf(p, bytes, Device::Cpu, [set = repacked_q4_1_](void* q) {
    {
      std::lock_guard<std::mutex> lock(set->mutex);
      set->ptrs.erase(q);
    }
    std::free(q);
  });
  release_pages(host.data, host.nbytes());
  Tensor t = host;
  t.data = p;
  keep.push_back(std::move(buf));
  return t;
}

void CpuBackend::copy_to_device(const Tensor& dst, const void* src, size_t bytes) {
  FERRY_ASSERT(bytes <= dst.nbytes());
  std::memcpy(dst.data, src, bytes);
}

void CpuBackend::copy_to_host(void* dst, const Tensor& src, size_t bytes) {
  FERRY_ASSERT(bytes <= src.nbytes());
  std::memcpy(dst, src.data, bytes);
}

void CpuBackend::embedding(const Tensor& out, const Tensor& table, const Tensor& ids) {
  const int64_t n = ids.numel(), dim = table.cols(), vocab = table.rows();
  FERRY_ASSERT(out.rows() == n && out.cols() == dim && out.dtype == DType::F32);
  const int32_t* id = ids.ptr<int32_t>();
  const bool repacked = is_repacked(table);
  for (int64_t i = 0; i < n; ++i) {
    FERRY_CHECK(id[i] >= 0 && id[i] < vocab, "token id {} out of range (vocabulary of {})", id[i], vocab);
    if (repacked) {
      dequantize_q4_1x8_row(table.dtype, static_cast<const BlockQ4_1x8*>(table.data), dim, id[i], out.row<float>(i));
    } else {
      dequantize_row(table.dtype, table.row(id[i]), out.row<float>(i), dim);
    }
  }
}

namespace {

void rms_norm_row(float* out, const float* x, const float* w, int64_t n, float eps) {
  double ss = 0;  // double: the reference must not lose precision on long rows
  for (int64_t j = 0; j < n; ++j) ss += double(x[j]) * x[j];
  const float scale = float(1.0 / std::sqrt(ss / double(n) + eps));
  for (int64_t j = 0; j < n; ++j) out[j] = x[j] * scale * w[j];
}

}  // namespace

void CpuBackend::rms_norm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  const int64_t rows = x.rows(), cols = x.cols();
  FERRY_ASSERT(weight.numel() == cols && out.rows() == rows && out.cols() == cols);
  const bool fast = options_.kernels == CpuKernels::Fast;
  pool_.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (fast) {
        vec_.rms_norm(out.row<float>(r), x.row<float>(r), weight.ptr<float>(), cols, eps);
      } else {
        rms_norm_row(out.row<float>(r), x.row<float>(r), weight.ptr<float>(), cols, eps);
      }
    }
  });
}

void CpuBackend::add_rms_norm(const Tensor& out, const Tensor& residual, const Tensor& delta, const Tensor& weight,
                              float eps) {
  const int64_t rows = residual.rows(), cols = residual.cols();
  FERRY_ASSERT(delta.rows() == rows && delta.cols() == cols && weight.numel() == cols);
  const bool fast = options_.kernels == CpuKernels::Fast;
  pool_.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* res = residual.row<float>(r);
      const float* d = delta.row<float>(r);
      if (fast) {
        vec_.add_rms_norm(out.row<float>(r), res, d, weight.ptr<float>(), cols, eps);
        continue;
      }
      for (int64_t j = 0; j < cols; ++j) res[j] += d[j];
      rms_norm_row(out.row<float>(r), res, weight.ptr<float>(), cols, eps);
    }
  });
}

void CpuBackend::matmul(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) {
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::F32);
  FERRY_ASSERT(x.cols() == w.cols() && out.rows() == x.rows() && out.cols() == w.rows());
  FERRY_ASSERT(bias.empty() || bias.numel() == w.rows());
  if (options_.kernels == CpuKernels::Reference) {
    matmul_reference(out, x, w, bias);
  } else {
    matmul_fast(out, x, w, bias);
  }
}

void CpuBackend::matmul_reference(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t n = x.rows(), n_in = x.cols(), n_out = w.rows();
  pool_.parallel_for(n_out, 8, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const void* wrow = w.row(o);
      for (int64_t t = 0; t < n; ++t) {
        float acc = dot_ref(w.dtype, wrow, x.row<float>(t), n_in);
        if (!bias.empty()) acc += bias.ptr<float>()[o];
        out.row<float>(t)[o] = acc;
      }
    }
  });
}

namespace {

// Below this many token rows matmul_fast quantizes activations on the calling thread: one row of 576 values
// takes ~0.3 us with AVX2, less than a pool wake-up.
constexpr int64_t kParallelQuantizeRows = 16;
// Output rows per matmul chunk are a multiple of this (and of every level's tile_w: 1, 2 or 4), so tiles
// never straddle two threads' chunks.
constexpr int64_t kMatmulRowGrain = 16;
static_assert(kMatmulRowGrain % kMaxDotWeightRows == 0);

}  // namespace

void CpuBackend::matmul_fast(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t n = x.rows(), n_in = x.cols(), n_out = w.rows();
  // repacked Q4_0 runs the Q4_1 kernel (m = -8 d), which needs the activation sums of Q8_1G4
  const bool repacked = is_repacked(w);
  const DType at = repacked ? DType::Q8_1G4 : activation_type(w.dtype);
  FERRY_CHECK(n_in % dtype_info(w.dtype).block_elems == 0 && n_in % dtype_info(at).block_elems == 0,
              "matmul: {} inputs are not whole blocks of {} / {}", n_in, dtype_name(w.dtype), dtype_name(at));
  // Quantize the activations once: x (n, n_in) f32 -> act (n, act_row bytes) of the partner format.
  // A few rows (decode) are done on this thread: waking the pool would cost more than the work.
  const size_t act_row = row_bytes(at, n_in);
  if (act_scratch_.size() < act_row * size_t(n)) act_scratch_.resize(act_row * size_t(n));
  uint8_t* act = act_scratch_.data();
  auto quantize_rows = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) quantize_activations(dot_, at, x.row<float>(t), act + size_t(t) * act_row, n_in);
  };
  if (n < kParallelQuantizeRows) {
    quantize_rows(0, n);
  } else {
    pool_.parallel_for(n, 4, quantize_rows);
  }
  if (repacked) {
    matmul_q4_1x8(out.ptr<float>(), act, act_row, n, w);
    if (!bias.empty()) {
      float* o = out.ptr<float>();
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < n_out; ++r) o[size_t(t) * size_t(n_out) + size_t(r)] += bias.ptr<float>()[r];
    }
    return;
  }
  // Output columns (weight rows) in chunks spread over the threads; within a chunk, tiles of tile_w weight
  // rows x tile_x tokens: each unpacked weight block serves tile_x tokens and each activation block tile_w
  // rows. The chunk's weight rows stay in L1/L2 while every token tile passes over them.
  // Decode (one token) streams every weight row once from memory: one row per call keeps the reads
  // sequential, which the hardware prefetcher follows best (SmolLM2 tg64, 1 thread: 105 tok/s with one row
  // against 90 with 4-row tiles, whose 4 interleaved 360-byte streams it follows worse).
  const int tw = n == 1 ? 1 : dot_.tile_w, tx = dot_.tile_x;
  const DotFn dot = dot_kernel(dot_, w.dtype);
  const size_t w_row = w.row_bytes();
  const auto* w_data = static_cast<const char*>(w.data);
  float* o = out.ptr<float>();
  const float* b = bias.empty() ? nullptr : bias.ptr<float>();
  pool_.parallel_for(n_out, kMatmulRowGrain, [&](int64_t o0, int64_t o1) {
    for (int64_t t0 = 0; t0 < n; t0 += tx) {
      const int nt = int(std::min<int64_t>(tx, n - t0));
      for (int64_t r0 = o0; r0 < o1; r0 += tw) {
        const int nr = int(std::min<int64_t>(tw, o1 - r0));
        dot({.n = n_in, .w = w_data + size_t(r0) * w_row, .w_row_bytes = w_row, .n_w = nr,
             .x = act + size_t(t0) * act_row, .x_row_bytes = act_row, .n_x = nt,
             .out = o + size_t(t0) * size_t(n_out) + size_t(r0), .out_stride = size_t(n_out)});
      }
    }
    if (b != nullptr)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = o0; r < o1; ++r) o[size_t(t) * size_t(n_out) + size_t(r)] += b[r];
  });
}

void CpuBackend::matmul_q4_1x8(float* out, const uint8_t* act, size_t act_row, int64_t n, const Tensor& w) {
  // out: (n, n_out) f32; act: (n, act_row) Q8_1G4 rows; w: (n_out, n_in) repacked (q4_1x8.h).
  // Chunks of whole 8-row groups (kMatmulRowGrain is a multiple of 8) per thread; within a chunk, tiles of
  // 4 tokens x 8 rows, token tiles outside so the chunk's weights stay in cache across them.
  static_assert(kMatmulRowGrain % kQ41x8Rows == 0);
  const int64_t n_out = w.rows(), n_in = w.cols(), nb = n_in / kQK;
  const auto* wr = static_cast<const BlockQ4_1x8*>(w.data);
  pool_.parallel_for(n_out, kMatmulRowGrain, [&](int64_t o0, int64_t o1) {
    for (int64_t t0 = 0; t0 < n; t0 += 4) {
      const int nt = int(std::min<int64_t>(4, n - t0));
      for (int64_t r0 = o0; r0 < o1; r0 += kQ41x8Rows) {
        const int nr = int(std::min<int64_t>(kQ41x8Rows, o1 - r0));
        q4_1x8_dot(n_in, wr + (r0 / kQ41x8Rows) * nb, act + size_t(t0) * act_row, act_row, nt, nr,
                   out + size_t(t0) * size_t(n_out) + size_t(r0), size_t(n_out));
      }
    }
  });
}

void CpuBackend::rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, RopeOrdering ordering) {
  FERRY_ASSERT(x.n_dims == 3 && x.dtype == DType::F32);
  const int64_t n = x.shape[0], n_heads = x.shape[1], head_dim = x.shape[2];
  const int64_t half = inv_freq.numel();
  FERRY_ASSERT(2 * half <= head_dim && positions.numel() == n);
  const int32_t* pos = positions.ptr<int32_t>();
  const float* freq = inv_freq.ptr<float>();
  // cos/sin per (token, frequency): the same positions come back for q and k of every layer of a step, so
  // the table is kept and rebuilt only when the positions or frequencies differ from the last call's.
  RopeTable& tab = rope_table_;
  const bool same = tab.positions.size() == size_t(n) && tab.inv_freq.size() == size_t(half) &&
                    std::equal(pos, pos + n, tab.positions.begin()) && std::equal(freq, freq + half, tab.inv_freq.begin());
  if (!same) {
    tab.positions.assign(pos, pos + n);
    tab.inv_freq.assign(freq, freq + half);
    tab.cos_sin.resize(size_t(n * 2 * half));
    pool_.parallel_for(n, 16, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* cs = tab.cos_sin.data() + t * 2 * half;
        for (int64_t i = 0; i < half; ++i) {
          // angle in double: positions up to 1e6 times frequencies near 1 keep their precision
          const double a = double(pos[t]) * double(freq[i]);
          cs[2 * i] = float(std::cos(a));
          cs[2 * i + 1] = float(std::sin(a));
        }
      }
    });
  }
  pool_.parallel_for(n, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* cs = tab.cos_sin.data() + t * 2 * half;
      for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x.ptr<float>() + (t * n_heads + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i0 = ordering == RopeOrdering::Interleaved ? 2 * i : i;
          const int64_t i1 = ordering == RopeOrdering::Interleaved ? 2 * i + 1 : i + half;
          const float c = cs[2 * i], s = cs[2 * i + 1];
          const float a = v[i0], b = v[i1];
          v[i0] = a * c - b * s;
          v[i1] = a * s + b * c;
        }
      }
    }
  });
}

void CpuBackend::store_kv(const Tensor& k_cache, const Tensor& v_cache, const Tensor& k, const Tensor& v,
                          const Tensor& slots) {
  const int64_t n = k.shape[0];
  const int64_t row = k.numel() / n;  // n_kv_heads * head_dim
  const int64_t n_slots = k_cache.shape[0] * k_cache.shape[1];
  FERRY_ASSERT(k_cache.dtype == DType::F32 && row == k_cache.shape[2] * k_cache.shape[3]);
  const int64_t* slot = slots.ptr<int64_t>();
  for (int64_t t = 0; t < n; ++t) {
    FERRY_ASSERT(slot[t] >= 0 && slot[t] < n_slots);
    std::memcpy(k_cache.ptr<float>() + slot[t] * row, k.ptr<float>() + t * row, size_t(row) * 4);
    std::memcpy(v_cache.ptr<float>() + slot[t] * row, v.ptr<float>() + t * row, size_t(row) * 4);
  }
}

void CpuBackend::attention(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                           const AttentionMeta& meta, float scale) {
  if (options_.kernels == CpuKernels::Reference) {
    paged_attention_cpu(pool_, out, q, k_cache, v_cache, meta, scale);
  } else {
    paged_attention_fast(pool_, vec_, out, q, k_cache, v_cache, meta, scale);
  }
}

void CpuBackend::swiglu(const Tensor& out, const Tensor& gate, const Tensor& up) {
  const int64_t total = gate.numel();
  FERRY_ASSERT(up.numel() == total && out.numel() == total);
  const float* g = gate.ptr<float>();
  const float* u = up.ptr<float>();
  float* o = out.ptr<float>();
  if (options_.kernels == CpuKernels::Fast) {
    pool_.parallel_for(total, 4096, [&](int64_t i0, int64_t i1) { vec_.swiglu(o + i0, g + i0, u + i0, i1 - i0); });
    return;
  }
  pool_.parallel_for(total, 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  });
}

void CpuBackend::gather_rows(const Tensor& out, const Tensor& x, const Tensor& rows) {
  const int64_t m = rows.numel();
  FERRY_ASSERT(out.rows() == m && out.cols() == x.cols() && out.dtype == x.dtype);
  for (int64_t i = 0; i < m; ++i) {
    const int32_t r = rows.ptr<int32_t>()[i];
    FERRY_ASSERT(r >= 0 && r < x.rows());
    std::memcpy(out.row(i), x.row(r), x.row_bytes());
  }
}

}  // namespace ferry
