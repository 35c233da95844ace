// Model execution for the serving loop: turns a StepPlan into one Batch (tokens of every chunk flattened,
// per-sequence block tables padded with -1 to the longest), runs LlamaModel::forward, and hands back the
// logits of the chunks that sample.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "model/batch.h"
#include "model/llama_model.h"

namespace ferry {

class ModelRunner {
 public:
  explicit ModelRunner(LlamaModel& model) : model_(model) {}

  // Runs the plan's chunks. Afterwards logits(i) is the (vocab_size) row of the i-th chunk that samples (in
  // plan order). Does not advance the sequences (the caller commits them).
  void run(const StepPlan& plan);
  std::span<const float> logits(size_t i) const;

 private:
  LlamaModel& model_;
  Batch batch_;
  std::vector<float> logits_;  // (n_sampling_chunks, vocab_size) row-major
};

}  // namespace ferry
