// The device bytes of a (rows, cols) weight of a native type t (weight_layout.cuh), built on the host by the same
// repack prepare_weight uses (split layouts: quants, then the scale records at scales_offset), followed by 16
// poison bytes: what the host emulation tests feed the decoders and kernels' lane math.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cuda/matmul/weight_layout.cuh"
#include "backends/cuda/matmul/weight_repack.h"

namespace ferry::cuda_ops {

inline std::vector<uint8_t> device_layout(DType t, const std::vector<uint8_t>& gguf, int64_t rows, int64_t cols) {
  std::vector<uint8_t> out(prepared_bytes(t, rows, cols) + 16, 0xEE);
  if (is_split_type(t)) {
    std::vector<uint8_t> q, s;
    split_blocks(t, gguf.data(), rows, cols, q, s);
    std::memcpy(out.data(), q.data(), q.size());
    std::memcpy(out.data() + scales_offset(t, rows, cols), s.data(), s.size());
  } else {
    std::memcpy(out.data(), gguf.data(), gguf.size());
  }
  return out;
}

}  // namespace ferry::cuda_ops
