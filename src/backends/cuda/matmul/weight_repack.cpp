#include "backends/cuda/matmul/weight_repack.h"

#include <cstring>

#include "backends/cuda/matmul/weight_layout.cuh"
#include "formats/quant.h"

namespace ferry::cuda_ops {

void split_blocks(DType t, const uint8_t* src, int64_t count, int64_t cols, std::vector<uint8_t>& quants,
                  std::vector<uint8_t>& scales) {
  FERRY_ASSERT(t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1);
  FERRY_ASSERT(cols % kQBlock == 0);
  const size_t blocks = size_t(count) * size_t(cols / kQBlock);
  const size_t qb = size_t(split_qbytes(t)), sb = size_t(split_sbytes(t));
  const size_t block_bytes = size_t(dtype_info(t).block_bytes);
  quants.resize(blocks * qb);
  scales.resize(blocks * sb);
  for (size_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = src + b * block_bytes;
    // GGUF block: fp16 d [, fp16 m], then the quants; the split layout keeps (d [, m]) and the quants apart.
    std::memcpy(scales.data() + b * sb, blk, sb);
    std::memcpy(quants.data() + b * qb, blk + sb, qb);
  }
  static_assert(sizeof(BlockQ8_0) == 2 + 32 && sizeof(BlockQ4_0) == 2 + 16 && sizeof(BlockQ4_1) == 4 + 16);
}

}  // namespace ferry::cuda_ops
