// The requests a load run sends: fixed input/output lengths, or a ShareGPT-like mix (log-normal lengths
// around the given means, seeded), with random token-id prompts (no two share a prefix unless equal).
#pragma once

#include <cstdint>
#include <vector>

namespace ferry::bench {

enum class LengthMix { Fixed, ShareGpt };

struct WorkloadOptions {
  int n_requests = 32;
  int input_len = 32;        // prompt tokens (the mean with ShareGpt)
  int output_len = 32;       // generated tokens (the mean with ShareGpt)
  LengthMix mix = LengthMix::Fixed;
  uint64_t seed = 1;
  int32_t token_lo = 1000;   // prompt token ids are drawn from [token_lo, token_hi)
  int32_t token_hi = 20000;
  int max_total_len = 0;     // > 0: input + output clipped to this (the server's context)
};

struct WorkItem {
  std::vector<int32_t> prompt;  // token ids
  int output_len = 0;
};

std::vector<WorkItem> make_workload(const WorkloadOptions& o);

}  // namespace ferry::bench
