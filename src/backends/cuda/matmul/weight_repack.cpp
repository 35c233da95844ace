#include "backends/cuda/matmul/weight_repack.h"

#include <cstddef>
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
  const size_t q_at = size_t(split_quants_at(t));
  FERRY_ASSERT(q_at + qb <= block_bytes && qb + sb >= block_bytes);
  quants.resize(blocks * qb);
  scales.assign(blocks * sb, 0);
  // GGUF blocks: the quants at q_at; the record is the bytes before them (fp16 d [, fp16 m] [, qh]; Q2_K's scales)
  // then those after them (Q6_K's scales and d, F8's scale, Q2_K's d and dmin, Q3_K's scales and d), zero-padded to
  // split_sbytes (Q3_K: 14 -> 16). The split layout keeps quants and records apart, each in its GGUF byte order.
  const size_t tail = block_bytes - q_at - qb;
  for (size_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = src + b * block_bytes;
    uint8_t* rec = scales.data() + b * sb;
    std::memcpy(quants.data() + b * qb, blk + q_at, qb);
    std::memcpy(rec, blk, q_at);
    std::memcpy(rec + q_at, blk + q_at + qb, tail);
  }
  static_assert(sizeof(BlockQ8_0) == 2 + 32 && sizeof(BlockQ4_0) == 2 + 16 && sizeof(BlockQ4_1) == 4 + 16);
  static_assert(sizeof(BlockQ2_K) == 16 + kQ2KQBytes + 4 && offsetof(BlockQ2_K, qs) == 16);
  static_assert(sizeof(BlockQ3_K) == kQ3KQBytes + 14 && offsetof(BlockQ3_K, scales) == kQ3KQBytes);
}

}  // namespace ferry::cuda_ops
