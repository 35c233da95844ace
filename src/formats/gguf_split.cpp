#include "formats/gguf_split.h"

#include <filesystem>
#include <limits>

#include "core/check.h"
#include "formats/gguf_split_name.h"

namespace ferry {
namespace {

// `key` of `file` as an integer in [lo, hi]; ferry::Error naming the file and the key otherwise.
int64_t split_key(const GgufFile& file, const char* key, int64_t lo, int64_t hi) {
  const int64_t v = file.get_int(key);  // names the file and the key when missing or not an integer
  FERRY_CHECK(v >= lo && v <= hi, "{}: metadata key '{}' is {}, outside {}..{}", file.name(), key, v, lo, hi);
  return v;
}

}  // namespace

std::optional<GgufSplitInfo> gguf_split_info(const GgufFile& file) {
  if (!file.has(kGgufSplitCount)) {
    FERRY_CHECK(!file.has(kGgufSplitNo), "{}: metadata key '{}' without '{}'", file.name(), kGgufSplitNo,
                kGgufSplitCount);
    return std::nullopt;
  }
  GgufSplitInfo info;
  info.count = int(split_key(file, kGgufSplitCount, 1, kGgufMaxShards));
  info.index = int(split_key(file, kGgufSplitNo, 0, info.count - 1));
  info.n_tensors = split_key(file, kGgufSplitTensorsCount, 0, std::numeric_limits<int32_t>::max());
  return info;
}

GgufSplitSet GgufSplitSet::open(const std::string& path) {
  GgufFile given = GgufFile::open(path);
  const std::optional<GgufSplitInfo> info = gguf_split_info(given);
  std::vector<GgufFile> shards;
  if (!info || info->count == 1) {
    shards.push_back(std::move(given));
    return assemble(std::move(shards));
  }
  const std::optional<GgufSplitName> name = parse_gguf_split_name(path);
  FERRY_CHECK(name.has_value(),
              "{}: shard {} of {} of a split GGUF, but its name is not PREFIX-NNNNN-of-MMMMM.gguf, so the other shards "
              "cannot be found",
              path, info->index + 1, info->count);
  FERRY_CHECK(name->number == info->index + 1 && name->count == info->count,
              "{}: the file name says shard {} of {}, but split.no and split.count say shard {} of {}", path,
              name->number, name->count, info->index + 1, info->count);
  for (int number = 1; number <= info->count; ++number) {
    if (number == name->number) {
      shards.push_back(std::move(given));
      continue;
    }
    const std::string shard = gguf_split_name(name->prefix, number, info->count);
    std::error_code ec;
    FERRY_CHECK(std::filesystem::is_regular_file(shard, ec), "split GGUF {}: shard {} of {} is missing: {}", path,
                number, info->count, shard);
    shards.push_back(GgufFile::open(shard));
  }
  return assemble(std::move(shards));
}

GgufSplitSet GgufSplitSet::assemble(std::vector<GgufFile> shards) {
  FERRY_ASSERT(!shards.empty());
  GgufSplitSet set;
  const GgufFile& first = shards.front();
  const std::optional<GgufSplitInfo> first_info = gguf_split_info(first);
  set.split_ = first_info.has_value();
  FERRY_CHECK(set.split_ || shards.size() == 1, "{}: no '{}' key, so it is not shard 1 of a split GGUF", first.name(),
              kGgufSplitCount);
  if (set.split_) {
    FERRY_CHECK(first_info->count == int(shards.size()), "{}: split.count is {}, but the set has {} shards",
                first.name(), first_info->count, shards.size());
    const std::string arch = first.get_string("general.architecture", "");
    for (size_t i = 0; i < shards.size(); ++i) {
      const GgufFile& s = shards[i];
      const std::optional<GgufSplitInfo> info = gguf_split_info(s);
      FERRY_CHECK(info.has_value(), "{}: no '{}' key, so it is not a shard of the split GGUF {}", s.name(),
                  kGgufSplitCount, first.name());
      FERRY_CHECK(info->count == first_info->count, "{}: split.count is {}, but shard 1 ({}) says {}", s.name(),
                  info->count, first.name(), first_info->count);
      FERRY_CHECK(info->index == int(i), "{}: split.no is {} (shard {}), but it stands as shard {} of {}", s.name(),
                  info->index, info->index + 1, i + 1, shards.size());
      FERRY_CHECK(info->n_tensors == first_info->n_tensors,
                  "{}: split.tensors.count is {}, but shard 1 ({}) says {}: a shard of another model?", s.name(),
                  info->n_tensors, first.name(), first_info->n_tensors);
      const std::string shard_arch = s.get_string("general.architecture", arch);
      FERRY_CHECK(shard_arch == arch, "{}: general.architecture is '{}', but shard 1 ({}) says '{}': a shard of another "
                  "model?", s.name(), shard_arch, first.name(), arch);
    }
  }
  set.shards_ = std::move(shards);
  std::map<std::string, size_t> shard_of;  // tensor name -> shard index, for the duplicate check
  for (size_t i = 0; i < set.shards_.size(); ++i) {
    for (const GgufTensorInfo& t : set.shards_[i].tensors()) {
      const auto [it, fresh] = shard_of.emplace(t.name, i);
      FERRY_CHECK(fresh, "split GGUF {}: tensor '{}' is in shard {} ({}) and again in shard {} ({})",
                  set.shards_.front().name(), t.name, it->second + 1, set.shards_[it->second].name(), i + 1,
                  set.shards_[i].name());
      set.tensor_index_[t.name] = set.tensors_.size();
      set.tensors_.push_back(&t);
    }
  }
  if (set.split_)
    FERRY_CHECK(int64_t(set.tensors_.size()) == first_info->n_tensors,
                "split GGUF {}: its {} shards hold {} tensors, but split.tensors.count says {}",
                set.shards_.front().name(), set.shards_.size(), set.tensors_.size(), first_info->n_tensors);
  return set;
}

const GgufTensorInfo* GgufSplitSet::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : tensors_[it->second];
}

uint64_t GgufSplitSet::file_bytes() const {
  uint64_t n = 0;
  for (const GgufFile& s : shards_) n += s.file_size();
  return n;
}

}  // namespace ferry
