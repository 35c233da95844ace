// Tensor: a non-owning view of contiguous memory. Memory belongs to a backend allocation or a model
// file's mmap. Shapes are outermost-first (PyTorch order): shape[n_dims-1] is contiguous.
// e.g. a weight of shape {n_out, n_in} in Q4_0 is n_out rows of n_in/32 blocks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/dtype.h"

namespace ferry {

enum class Device : uint8_t { Cpu, Cuda };

inline constexpr int kMaxDims = 4;

struct Tensor {
  DType dtype = DType::F32;
  int n_dims = 0;
  std::array<int64_t, kMaxDims> shape{};
  void* data = nullptr;
  Device device = Device::Cpu;

  static Tensor make(DType dtype, std::initializer_list<int64_t> dims, void* data, Device device = Device::Cpu) {
    Tensor t;
    t.dtype = dtype;
    t.data = data;
    t.device = device;
    FERRY_ASSERT(dims.size() <= kMaxDims);
    for (int64_t d : dims) t.shape[t.n_dims++] = d;
    return t;
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < n_dims; ++i) n *= shape[i];
    return n;
  }
  int64_t cols() const { return n_dims == 0 ? 1 : shape[n_dims - 1]; }   // innermost extent
  int64_t rows() const { return cols() == 0 ? 0 : numel() / cols(); }    // product of the outer extents
  size_t row_bytes() const { return ferry::row_bytes(dtype, cols()); }
  size_t nbytes() const { return size_t(rows()) * row_bytes(); }
  bool empty() const { return data == nullptr; }

  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  // Pointer to row r (rows counted over all outer dims).
  template <typename T = void>
  T* row(int64_t r) const { return reinterpret_cast<T*>(static_cast<char*>(data) + size_t(r) * row_bytes()); }

  // View of rows [start, start+count) as a 2-D tensor {count, cols}.
  Tensor rows_view(int64_t start, int64_t count) const {
    Tensor t = make(dtype, {count, cols()}, row(start), device);
    return t;
  }

  std::string shape_str() const;
};

}  // namespace ferry
