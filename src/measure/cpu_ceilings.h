// The CPU's roofline ceilings, measured at the start of `ferry bench --device cpu` in well under a second.
//   bandwidth: bytes read per second by n_threads threads, each summing its slice of one buffer larger than
//              the last-level cache (clamp(4 × LLC, 64 MiB, 512 MiB)); the best of a few passes. Read, not
//              copy: decode reads weights; what it writes (KV, logits) is small.
//   peak:      f32 FLOP/s of a loop of independent fused multiply-adds (12 chains per thread) at the SIMD
//              level the fast kernels run at (AVX-512, AVX2+FMA, or plain C++ vectorised by the compiler),
//              best of 3 runs of ~25 ms on n_threads threads. It is measured, not computed from SIMD width × cores × clock.
//              The int8 dot products of the quantized kernels (VNNI) can exceed it; it is the f32 roof.
#pragma once

#include "backends/cpu/simd.h"
#include "measure/roofline.h"

namespace ferry {

struct CpuCeilingsReport {
  Ceilings ceilings;      // source names what was measured and how
  double buffer_bytes = 0;
  double llc_bytes = 0;   // last-level cache size reported by the OS (0: unknown)
  int threads = 0;
  double seconds = 0;     // time the measurement took
};

// n_threads <= 0: all hardware threads.
CpuCeilingsReport measure_cpu_ceilings(int n_threads, SimdLevel level);

}  // namespace ferry
