#include "engine/load_progress.h"

#include <algorithm>

namespace ferry {

ProgressWeightSource::ProgressWeightSource(std::unique_ptr<WeightSource> inner, std::string stage, uint64_t total,
                                           LoadProgressFn on_progress)
    : inner_(std::move(inner)), stage_(std::move(stage)), total_(total), on_progress_(std::move(on_progress)) {}

const Tensor* ProgressWeightSource::find(const std::string& name) const {
  const Tensor* t = inner_->find(name);
  if (t == nullptr) return t;
  uint64_t done = 0;
  {
    std::lock_guard lock(mutex_);
    if (!seen_.insert(name).second) return t;
    done_ = std::min<uint64_t>(total_, done_ + t->nbytes());
    done = done_;
  }
  on_progress_({stage_, done, total_});
  return t;
}

std::unique_ptr<WeightSource> ProgressWeightSource::finish() {
  on_progress_({stage_, total_, total_});
  return std::move(inner_);
}

}  // namespace ferry
