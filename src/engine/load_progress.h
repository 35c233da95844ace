// Load progress of the weights: a WeightSource that passes every lookup through to the file's and reports the
// bytes of each distinct tensor the loader asks for (the loader prepares or uploads a tensor right after finding
// it, so the count follows the repack / upload). Lookups by several rank threads are serialized.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "ferry/engine.h"
#include "model/weights.h"

namespace ferry {

class ProgressWeightSource : public WeightSource {
 public:
  ProgressWeightSource(std::unique_ptr<WeightSource> inner, std::string stage, uint64_t total, LoadProgressFn on_progress);
  const Tensor* find(const std::string& name) const override;
  std::string describe() const override { return inner_->describe(); }
  // Reports the stage complete and gives the file's own source back.
  std::unique_ptr<WeightSource> finish();

 private:
  std::unique_ptr<WeightSource> inner_;
  std::string stage_;
  uint64_t total_;
  LoadProgressFn on_progress_;
  mutable std::mutex mutex_;
  mutable std::set<std::string> seen_;
  mutable uint64_t done_ = 0;
};

}  // namespace ferry
