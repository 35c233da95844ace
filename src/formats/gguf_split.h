// A GGUF model in one file or split over shards the way llama.cpp's gguf-split writes them: every shard is a
// whole GGUF file carrying split.no (u16, 0-based), split.count (u16) and split.tensors.count (i32, the tensors
// of all shards together); shard 1 (split.no 0) carries the model's metadata, the tensors are spread over the
// shards in order, each tensor's bytes stay mapped in its own shard. Files are named PREFIX-NNNNN-of-MMMMM.gguf
// (formats/gguf_split_name.h), so any shard finds the others beside it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "formats/gguf.h"

namespace ferry {

// The split.* keys of one file.
struct GgufSplitInfo {
  int index = 0;          // split.no: 0-based
  int count = 1;          // split.count
  int64_t n_tensors = 0;  // split.tensors.count: over every shard
};
// nullopt when the file has no split.count (a plain file); ferry::Error naming the file when a split key is of the
// wrong type, out of range, or split.count is there without split.no.
std::optional<GgufSplitInfo> gguf_split_info(const GgufFile& file);

// gguf-split's names of the three keys.
inline constexpr const char* kGgufSplitNo = "split.no";
inline constexpr const char* kGgufSplitCount = "split.count";
inline constexpr const char* kGgufSplitTensorsCount = "split.tensors.count";

class GgufSplitSet {
 public:
  // A plain GGUF file, or any shard of a split set: the set's other shards are opened from beside it. Throws
  // ferry::Error in one line naming the missing or inconsistent shard.
  static GgufSplitSet open(const std::string& path);
  // Shards already parsed, shards[i] the one of split.no i (a single plain file is a set of one). Checks that
  // every shard agrees on split.count and split.tensors.count, that the tensor count adds up and that no tensor
  // is in two shards. open() and the GGUF fuzzer use it.
  static GgufSplitSet assemble(std::vector<GgufFile> shards);

  GgufSplitSet(GgufSplitSet&&) = default;
  GgufSplitSet& operator=(GgufSplitSet&&) = default;
  GgufSplitSet(const GgufSplitSet&) = delete;  // tensors_ points into shards_
  GgufSplitSet& operator=(const GgufSplitSet&) = delete;

  const GgufFile& metadata() const { return shards_.front(); }  // shard 1: the model's metadata
  const std::vector<GgufFile>& shards() const { return shards_; }
  bool is_split() const { return split_; }  // the files carry split.* keys (a set of 1 included)
  // Every tensor in shard order, then file order within a shard.
  const std::vector<const GgufTensorInfo*>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  uint64_t file_bytes() const;  // all shards together

 private:
  GgufSplitSet() = default;

  std::vector<GgufFile> shards_;
  bool split_ = false;
  std::vector<const GgufTensorInfo*> tensors_;
  std::map<std::string, size_t> tensor_index_;  // name -> index into tensors_
};

}  // namespace ferry
