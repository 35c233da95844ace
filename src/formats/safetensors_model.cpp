// SafetensorsModel: a Hugging Face model folder. Like transformers, a single model.safetensors wins over
// an index; with an index, every shard its weight_map names is opened once, and the union of their tensors
// must have unique names and include every tensor the index promises.
#include <algorithm>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "core/check.h"
#include "formats/safetensors.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

// config.json and the shard index nest a few levels; deeper input is refused as it is parsed (the parser
// would spend ~70 bytes per '[' and its destructor recurses).
constexpr int kMaxJsonDepth = 32;

nlohmann::json read_json(const std::string& path) {
  const MappedFile file(path);
  bool too_deep = false;
  const nlohmann::json::parser_callback_t limit_depth = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxJsonDepth) {
      too_deep = true;
      throw std::length_error("too deep");
    }
    return true;
  };
  try {
    return nlohmann::json::parse(file.data(), file.data() + file.size(), limit_depth);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON: {}", path, e.what());
  } catch (const std::length_error&) {
    FERRY_CHECK(!too_deep, "{}: malformed JSON: nested deeper than {} levels", path, kMaxJsonDepth);
    throw;
  }
}

// A shard name from the index must name a file inside the folder, nothing else.
void check_shard_name(const std::string& shard, const std::string& index_path) {
  FERRY_CHECK(!shard.empty() && shard != "." && shard != ".." && shard.find('/') == std::string::npos &&
                  shard.find('\\') == std::string::npos && shard.find('\0') == std::string::npos,
              "{}: shard name '{}' is not a plain file name", index_path, shard);
}

}  // namespace

SafetensorsModel SafetensorsModel::open(const std::string& dir) {
  SafetensorsModel m;
  m.dir_ = dir;
  FERRY_CHECK(fs::is_directory(dir), "'{}' is not a model folder (not a directory)", dir);
  const fs::path root(dir);

  const std::string config_path = (root / "config.json").string();
  FERRY_CHECK(fs::exists(config_path), "model folder '{}' has no config.json", dir);
  m.config_ = read_json(config_path);
  FERRY_CHECK(m.config_.is_object(), "{}: not a JSON object", config_path);

  const std::string single = (root / "model.safetensors").string();
  const std::string index_path = (root / "model.safetensors.index.json").string();
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::vector<std::string> shard_names;
  if (fs::exists(single)) {
    shard_names.push_back("model.safetensors");
  } else {
    FERRY_CHECK(fs::exists(index_path), "model folder '{}' has neither model.safetensors nor "
                "model.safetensors.index.json", dir);
    const nlohmann::json index = read_json(index_path);
    FERRY_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
                "{}: no 'weight_map' object", index_path);
    std::set<std::string> distinct;
    for (const auto& [tensor, shard] : index["weight_map"].items()) {
      FERRY_CHECK(shard.is_string(), "{}: weight_map entry for '{}' is not a file name", index_path, tensor);
      const std::string name = shard.get<std::string>();
      check_shard_name(name, index_path);
      weight_map[tensor] = name;
      distinct.insert(name);
    }
    FERRY_CHECK(!distinct.empty(), "{}: weight_map is empty", index_path);
    shard_names.assign(distinct.begin(), distinct.end());
  }

  for (size_t s = 0; s < shard_names.size(); ++s) {
    const std::string path = (root / shard_names[s]).string();
    FERRY_CHECK(fs::exists(path), "model folder '{}': shard {} named in model.safetensors.index.json is missing", dir,
                shard_names[s]);
    m.files_.push_back(SafetensorsFile::open(path));
    const auto& tensors = m.files_.back().tensors();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto [it, fresh] = m.index_.try_emplace(tensors[i].name, s, i);
      FERRY_CHECK(fresh, "model folder '{}': tensor '{}' is in two shards, {} and {}", dir, tensors[i].name,
                  shard_names[it->second.first], shard_names[s]);
    }
  }
  for (const auto& [tensor, shard] : weight_map) {
    const auto it = m.index_.find(tensor);
    FERRY_CHECK(it != m.index_.end() && shard_names[it->second.first] == shard,
                "model folder '{}': the index puts tensor '{}' in {}, which does not contain it", dir, tensor, shard);
  }
  return m;
}

const SafetensorsTensor* SafetensorsModel::find(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) return nullptr;
  return files_[it->second.first].find(name);  // throws for an unsupported tensor
}

const SafetensorsTensor* SafetensorsModel::entry(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &files_[it->second.first].tensors()[it->second.second];
}

const SafetensorsTensor& SafetensorsModel::get(const std::string& name) const {
  const SafetensorsTensor* t = find(name);
  FERRY_CHECK(t != nullptr, "model folder '{}' has no tensor '{}'", dir_, name);
  return *t;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, where] : index_) out.push_back(name);
  return out;  // std::map keeps them sorted
}

}  // namespace ferry
