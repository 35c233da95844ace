// Random-weight models without a file: `-m random:SHAPE[:TYPE[:SEED]]` (e.g. random:llama3-70b:bf16) gives the
// model `ferry gen --shape SHAPE --type TYPE --seed SEED` would write (the same values bit for bit), generated in
// memory. Each tensor-parallel rank generates only its own shard, tensor by tensor (the generators are seeded
// per tensor and row, so a slice is drawn without the rest), and on a GPU frees each host tensor once it is
// uploaded: a 70B BF16 model runs at --tp 2 on a machine whose disk cannot hold its 141 GB file.
//
// The vocabulary and metadata come from a metadata-only GGUF written to a temporary file and removed once
// opened (a few MB; no weights are written).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "model/model_file.h"
#include "model/random_model.h"
#include "model/weights.h"
#include "parallel/sharding.h"

namespace ferry {

// True for a "random:..." model path.
bool is_random_model_path(const std::string& path);
// Load progress of a random model: `done` of `total` bytes of its tensors generated (each tensor counted whole, the
// first time any rank makes it). Called from the ranks' threads, one at a time.
using RandomProgressFn = std::function<void(uint64_t done, uint64_t total)>;

// Opens "random:SHAPE[:TYPE[:SEED]]" (TYPE default bf16, SEED default 1: ferry gen's): config, vocabulary,
// ModelFile::tensors (type and shape; no data) and a RandomWeightSource as the weights, reporting to
// `on_progress` (may be empty) as they are generated.
ModelFile open_random_model(const std::string& path, RandomProgressFn on_progress = {});

// The weights of a random model. find() generates full tensors on first use and keeps them (world 1 on the CPU
// uses them in place); load_sharded_weights (parallel/sharding.h) uses load_random_shard instead.
class RandomWeightSource final : public WeightSource {
 public:
  RandomWeightSource(std::string describe, std::vector<RandomTensor> tensors, RandomProgressFn on_progress = {});
  const Tensor* find(const std::string& name) const override;
  std::string describe() const override { return describe_; }
  const RandomTensor* spec(const std::string& name) const;
  // A tensor (or a rank's slice of it) was generated: reports the whole tensor's bytes the first time.
  void count_generated(const std::string& name) const;
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  std::string describe_;
  std::map<std::string, RandomTensor> specs_;
  mutable std::map<std::string, std::pair<Tensor, std::shared_ptr<uint8_t[]>>> made_;
  RandomProgressFn on_progress_;
  uint64_t total_bytes_ = 0;  // every tensor, whole
  mutable std::mutex progress_mutex_;
  mutable std::set<std::string> generated_;
  mutable uint64_t generated_bytes_ = 0;
};

// This rank's weights of a random model, each slice generated directly. host_in_place (a CPU backend): the
// generated tensors are kept in weights.storage; else each is freed once the loader moved past it (at most a
// few host tensors exist at once), and `weights.named` entries of freed tensors lose their data pointer.
ModelWeights load_random_shard(const ShardPlan& plan, const RandomWeightSource& source, bool gguf_names,
                               Backend& backend);

}  // namespace ferry
