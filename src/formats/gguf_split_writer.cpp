// GgufWriter::write_split: the shards gguf-split writes. Shard k (0-based) is a whole GGUF file: shard 0 holds
// every metadata key, the others only general.alignment (when not the default 32, as their data section needs
// it); each adds split.no = k (u16), split.count (u16) and split.tensors.count (i32, all shards together).
#include <limits>
#include <utility>

#include "core/check.h"
#include "formats/gguf.h"
#include "formats/gguf_split.h"
#include "formats/gguf_split_name.h"

namespace ferry {
namespace {

void set_key(std::vector<std::pair<std::string, GgufValue>>& kv, const std::string& key, GgufValue value) {
  for (auto& [k, v] : kv)
    if (k == key) {
      v = std::move(value);
      return;
    }
  kv.emplace_back(key, std::move(value));
}

}  // namespace

std::vector<std::string> GgufWriter::write_split(const std::string& prefix, const GgufSplitLimits& limits) const {
  FERRY_CHECK(limits.max_tensors >= 0, "gguf writer: --split-max-tensors {} is negative", limits.max_tensors);
  FERRY_CHECK(tensors_.size() <= size_t(std::numeric_limits<int32_t>::max()), "gguf writer: {} tensors are too many",
              tensors_.size());
  // [first, end) of tensors_ per shard.
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t first = 0;
  uint64_t shard_bytes = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const uint64_t padded = (tensors_[i].nbytes + alignment_ - 1) / alignment_ * alignment_;
    const bool full = (limits.max_tensors > 0 && i - first >= size_t(limits.max_tensors)) ||
                      (limits.max_bytes > 0 && shard_bytes + padded > limits.max_bytes);
    if (i > first && full) {
      ranges.emplace_back(first, i);
      first = i;
      shard_bytes = 0;
    }
    shard_bytes += padded;
  }
  ranges.emplace_back(first, tensors_.size());
  FERRY_CHECK(ranges.size() <= size_t(kGgufMaxShards), "gguf writer: {} shards are more than split.count can hold ({})",
              ranges.size(), kGgufMaxShards);

  const int count = int(ranges.size());
  std::vector<std::string> paths;
  for (int k = 0; k < count; ++k) {
    Metadata kv;
    if (k == 0) {
      kv = kv_;
    } else {
      for (const auto& [key, value] : kv_)
        if (key == "general.alignment") kv.emplace_back(key, value);
    }
    set_key(kv, kGgufSplitNo, GgufValue{GgufType::U16, uint64_t(k)});
    set_key(kv, kGgufSplitCount, GgufValue{GgufType::U16, uint64_t(count)});
    set_key(kv, kGgufSplitTensorsCount, GgufValue::i32(int32_t(tensors_.size())));
    paths.push_back(gguf_split_name(prefix, k + 1, count));
    write_file(paths.back(), kv, ranges[size_t(k)].first, ranges[size_t(k)].second);
  }
  return paths;
}

}  // namespace ferry
