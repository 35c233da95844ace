// The phase-stamp table (stamp_table.h).
#include "backends/cuda/diag/stamp_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/common/launch.cuh"

namespace ferry::cuda_ops {

StampTable::StampTable(DeviceBuffer buffer) : buffer_(std::move(buffer)) {
  FERRY_CUDA_REQUIRE(buffer_.bytes() >= size_t(kMaxKinds) * kStampSlots * sizeof(unsigned long long));
}

PhaseStamps StampTable::slots(const std::string& kind, const std::vector<std::string>& phases) {
  auto* words = static_cast<unsigned long long*>(buffer_.data());
  for (size_t i = 0; i < kinds_.size(); ++i)
    if (kinds_[i].name == kind) return {words + i * kStampSlots};
  if (kinds_.size() >= size_t(kMaxKinds)) return {};
  kinds_.push_back({kind, phases});
  return {words + (kinds_.size() - 1) * kStampSlots};
}

std::string StampTable::report() const {
  if (kinds_.empty()) return {};
  std::vector<unsigned long long> t(kinds_.size() * kStampSlots);
  if (cudaMemcpy(t.data(), buffer_.data(), t.size() * sizeof(t[0]), cudaMemcpyDeviceToHost) != cudaSuccess)
    return "FERRY_CUDA_STAMPS: could not read the stamps back\n";
  unsigned long long first = ~0ull;
  for (size_t i = 0; i < kinds_.size(); ++i)
    if (t[i * kStampSlots] != 0) first = std::min(first, t[i * kStampSlots]);
  std::string out =
      "FERRY_CUDA_STAMPS: the last launch of each kernel, block 0, us (entry: after the earliest entry below; "
      "phases: after the kernel's own entry)\n";
  for (size_t i = 0; i < kinds_.size(); ++i) {
    const unsigned long long* s = t.data() + i * kStampSlots;
    if (s[0] == 0) continue;  // never stamped (not its kernel, or not block 0's path)
    out += fmt::format("  {:<34} entry {:9.2f}", kinds_[i].name, double(s[0] - first) / 1e3);
    for (size_t j = 0; j < kinds_[i].phases.size() && j + 1 < size_t(kStampSlots); ++j)
      if (s[j + 1] >= s[0]) out += fmt::format("  {} {:.2f}", kinds_[i].phases[j], double(s[j + 1] - s[0]) / 1e3);
    out += "\n";
  }
  return out;
}

}  // namespace ferry::cuda_ops
