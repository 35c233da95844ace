// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11), the generator behind cuRAND's and JAX's. A pure function of (key, counter), so the same draw can be
// recomputed anywhere (CPU, GPU kernel, after a preemption) without carrying generator state.
// Checked against Random123's known-answer vectors in tests/engine/sampler_test.cpp.
#pragma once

#include <array>
#include <cstdint>

namespace ferry {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

constexpr PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const uint64_t p0 = uint64_t{kMul0} * ctr[0];
    const uint64_t p1 = uint64_t{kMul1} * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
  }
  return ctr;
}

// A uniform float in [0, 1) for (seed, counter): the top 24 bits of Philox's first output word, times 2^-24.
// Exactly representable, so every platform gets the same float.
constexpr float philox_uniform(uint64_t seed, uint64_t counter) {
  const PhiloxCounter out = philox4x32_10(
      {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return static_cast<float>(out[0] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace ferry
