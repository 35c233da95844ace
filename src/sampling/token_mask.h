// Structured output's allowed-token masks applied to a logit row (the host sampler's and the CPU backend's path;
// the CUDA sampler's kernel is backends/cuda/sampling/token_mask.cuh).
#pragma once

#include <cstdint>
#include <span>

namespace ferry {

// logits: (vocab) f32, rewritten in place: -inf where bit t % 64 of mask[t / 64] is clear; mask: >= ceil(vocab / 64)
// words. Returns whether any token is allowed.
bool apply_token_mask(std::span<float> logits, std::span<const uint64_t> mask);

}  // namespace ferry
