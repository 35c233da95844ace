// Phase stamps: where the time goes inside one kernel of a replayed step, which a kernel timeline (bench/trace)
// cannot show. A kernel given a non-null PhaseStamps writes the global timer (ns) at its phase points, from block
// (0, 0, 0)'s thread 0 only, into slots of its own; each launch overwrites the previous one's, so what survives
// is the last launch of that kernel and shape (CudaBackend prints them at exit: FERRY_CUDA_STAMPS=1). One
// predicated branch per phase point when off. The struct is host-visible (kernel parameter structs hold it); stamp()
// is compiled by nvcc only.
#pragma once

#include <cstdint>

namespace ferry::cuda_ops {

inline constexpr int kStampSlots = 8;  // phase points a kernel may stamp (slot 0: entry)

struct PhaseStamps {
  unsigned long long* at = nullptr;  // [kStampSlots] device words, or null: off
};

#ifdef __CUDACC__
__device__ __forceinline__ void stamp(const PhaseStamps& s, int slot) {
  if (s.at != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    s.at[slot] = t;
  }
}
#endif

}  // namespace ferry::cuda_ops
