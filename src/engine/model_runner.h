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

// Decode padding (backends that replay step graphs): a graph is recorded per (tokens, sequences, table width,
// logit rows), so a decode step of n sequences is padded to the next power of two with dummy sequences (token
// 0 at position 0, KV in a scratch block no sequence owns, their logits computed and ignored). 1..128 running
// sequences then need 8 graphs per table-width bucket instead of 128. Worked example: 37 running sequences
// run as 64; the 27 dummies cost 27/64 of a decode step's activations but no weight traffic (the weights are
// read once per step whatever the batch), which is what a memory-bound decode step pays for.
class ModelRunner {
 public:
  // scratch_block: a KV block reserved for padding rows (-1: no padding).
  ModelRunner(LlamaModel& model, int32_t scratch_block) : model_(model), scratch_block_(scratch_block) {}

  // Runs the plan's chunks. Afterwards logits(i) is the (vocab_size) row of the i-th chunk that samples (in
  // plan order). Does not advance the sequences (the caller commits them).
  void run(const StepPlan& plan);
  // The same with the logits left on the device (model.supports_device_sampling()): rows[i] says what happens to
  // the i-th chunk that samples (Device: drawn there, token(i) holds the id; Host: its logits are copied,
  // logits(i) holds them). Decode padding rows are skipped.
  void run_sampled(const StepPlan& plan, std::span<const RowSampling> rows);
  // After run: every row; after run_sampled: the Host rows.
  std::span<const float> logits(size_t i) const;
  // After run_sampled, a Device row: the drawn id (-1: every logit was NaN/-inf).
  int32_t token(size_t i) const;

 private:
  void build_batch(const StepPlan& plan);  // fills batch_ (with decode padding rows at the end)

  LlamaModel& model_;
  int32_t scratch_block_;
  Batch batch_;
  std::vector<float> logits_;  // run: (n_sampling_chunks, vocab_size) row-major
  std::vector<RowSampling> row_modes_;  // run_sampled: (logit rows) the rows' settings, padding rows Skip
  SampledStep sampled_;                 // run_sampled: the drawn ids and the Host rows' logits
  std::vector<int32_t> host_index_;     // run_sampled: (n_sampling_chunks) row of sampled_.host_logits, -1: none
  bool device_step_ = false;            // whether the last step was run_sampled
};

}  // namespace ferry
