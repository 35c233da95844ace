// Host side of prepare_weight: turns rows of a GGUF-layout weight into the device layout of
// weight_layout.cuh, a batch of rows at a time (so a huge tensor never needs a second full host copy).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ferry::cuda_ops {

// One batch of rows [row0, row0 + count) of a split-layout weight (is_split_type; src: its GGUF blocks) split into
// quant bytes (count x nb x split_qbytes) and records (count x nb x split_sbytes, zero-padded), ready to be copied to
// offsets row0 * nb * split_qbytes and scales_offset + row0 * nb * split_sbytes.
void split_blocks(DType t, const uint8_t* src, int64_t count, int64_t cols, std::vector<uint8_t>& quants,
                  std::vector<uint8_t>& scales);

}  // namespace ferry::cuda_ops
