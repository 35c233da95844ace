#include "backends/cuda/matmul/weight_repack.h"

#include <cstring>

#include "backends/cuda/matmul/weight_layout.cuh"
#include "formats/quant.h"

namespace ferry::cuda_ops {

void split_blocks(DType t, const uint8_t* src, int64_t count, int64_t cols, std::vector<uint8_t>& quants,
                  std::vector<uint8_t>& scales) {
  FERRY_ASSERT(is_split_type(t));
  FERRY_ASSERT(cols % split_block_vals(t) == 0);
  const size_t blocks = size_t(count) * size_t(cols / split_block_vals(t));
  const size_t qb = size_t(split_qbytes(t)), sb = size_t(split_sbytes(t));
  const size_t block_bytes = size_t(dtype_info(t).block_bytes);
  FERRY_ASSERT(qb + sb == block_bytes);
  quants.resize(blocks * qb);
  scales.resize(blocks * sb);
  // GGUF blocks: the scale record first (fp16 d [, fp16 m] [, qh]) then the quants, or (Q6_K) the quants first;
  // the split layout keeps the two apart, each in its GGUF byte order.
  const size_t s_at = split_scales_first(t) ? 0 : qb, q_at = split_scales_first(t) ? sb : 0;
  for (size_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = src + b * block_bytes;
    std::memcpy(scales.data() + b * sb, blk + s_at, sb);
    std::memcpy(quants.data() + b * qb, blk + q_at, qb);
  }
  static_assert(sizeof(BlockQ8_0) == 2 + 32 && sizeof(BlockQ4_0) == 2 + 16 && sizeof(BlockQ4_1) == 4 + 16);
}

}  // namespace ferry::cuda_ops
