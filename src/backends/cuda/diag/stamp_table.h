// FERRY_CUDA_STAMPS=1 (CudaBackendOptions::phase_stamps): the phase stamps (phase_stamps.cuh) of the last launch
// of each kernel kind and shape in a step, collected in one device buffer and printed at exit, so that a device
// call shows where the time goes inside the attention and the matvecs of a replayed decode step (the kernel
// timeline of bench/trace shows only each kernel's start and end).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "backends/cuda/diag/phase_stamps.cuh"
#include "ops/backend.h"

namespace ferry::cuda_ops {

class StampTable {
 public:
  static constexpr int kMaxKinds = 16;
  // buffer: kMaxKinds * kStampSlots zeroed device words.
  explicit StampTable(DeviceBuffer buffer);
  // The slots of a kind ("attention", "stream_quant 4096x4096", ...): a new kind takes the next free slots, and
  // phases names its stamps 1.. (slot 0 is the entry). Off ({}) once kMaxKinds kinds exist.
  PhaseStamps slots(const std::string& kind, const std::vector<std::string>& phases);
  // One line per kind that was stamped: its entry in us after the earliest entry of the table, then each phase
  // in us after its own entry. Synchronizes (a device-to-host copy); call at exit.
  std::string report() const;

 private:
  struct Kind {
    std::string name;
    std::vector<std::string> phases;
  };
  DeviceBuffer buffer_;
  std::vector<Kind> kinds_;
};

}  // namespace ferry::cuda_ops
