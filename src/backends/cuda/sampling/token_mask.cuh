// Structured output on the device sampler: the rows' allowed-token masks (the grammar matcher's, computed on the
// host while the step's forward runs) applied to the logits just before sample_rows draws from them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda_ops {

struct TokenMaskParams {
  float* logits;         // (m, vocab) f32 device, rewritten in place: -inf where the token's bit is clear
  const uint64_t* mask;  // (m, words) u64 device: bit t % 64 of word t / 64 set when token t may be drawn
  int64_t m;
  int64_t vocab;
  int64_t words;  // >= ceil(vocab / 64)
};

// One thread per logit, a row per grid row; a plain launch on the sampler's stream.
void apply_token_mask(const TokenMaskParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
