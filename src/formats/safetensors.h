// safetensors: one file, and a Hugging Face model folder (one file or shards named by an index).
// File layout: u64 LE header length N, N bytes of JSON
//   {"<tensor>": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>", ...}}
// then the data section; offsets are relative to its start (byte 8 + N). Shapes are outermost first,
// row-major, which is ferry's order too. Every field read from the file is checked before it is used:
// the header fits in the file, offsets lie inside the data section, do not overlap, and span exactly
// numel × element size bytes; shape products cannot overflow; names are unique.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/tensor.h"

namespace ferry {

struct SafetensorsTensor {
  std::string name;
  std::string file_dtype;        // as written in the file: "F32", "BF16", "F8_E4M3", ...
  DType dtype = DType::F32;      // ferry's type; meaningful only when supported()
  int n_dims = 0;
  std::array<int64_t, kMaxDims> shape{};  // outermost first; valid for supported() tensors
  const uint8_t* data = nullptr;          // into the mapped file (or the caller's bytes); may be unaligned
  size_t nbytes = 0;
  std::string unsupported;  // empty, or why ferry cannot use it ("unsupported dtype F8_E4M3 for tensor x")

  bool supported() const { return unsupported.empty(); }
  // A CPU tensor over the bytes. Throws ferry::Error if !supported() or the data is not aligned to the
  // element size (files written by the safetensors library always are).
  Tensor view() const;
};

class SafetensorsFile {
 public:
  // Maps the file and parses it; throws ferry::Error naming the path and the problem.
  static SafetensorsFile open(const std::string& path);
  // Parses bytes owned by the caller (they must outlive the result). Used by tests and the fuzzer.
  static SafetensorsFile parse(const uint8_t* data, size_t size, std::string name = "<memory>");

  const std::string& name() const { return name_; }
  // Tensors in data order (ascending begin offset), including unsupported ones (see supported()).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // nullptr when absent; throws ferry::Error when present but of a type or rank ferry cannot use.
  const SafetensorsTensor* find(const std::string& name) const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t data_offset() const { return data_offset_; }  // 8 + header length

 private:
  std::string name_;
  std::shared_ptr<MappedFile> file_;  // null when parsing caller-owned bytes
  size_t data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

class SafetensorsModel {
 public:
  // dir holds config.json and either model.safetensors or model.safetensors.index.json plus the shards
  // its weight_map names. Throws ferry::Error for a missing file, a missing or misnamed shard, a tensor
  // found in two shards, or an index entry whose shard lacks that tensor.
  static SafetensorsModel open(const std::string& dir);

  // nullptr when absent; throws ferry::Error when present but unsupported (as SafetensorsFile::find).
  const SafetensorsTensor* find(const std::string& name) const;
  // Like find, but a missing tensor is an error naming the model folder.
  const SafetensorsTensor& get(const std::string& name) const;
  // nullptr when absent; the entry as parsed, supported or not (file_dtype, bytes; shape valid up to kMaxDims
  // dimensions): for tensors of a type read by a converter (F8_E4M3 weights, model/fp8_weights.h).
  const SafetensorsTensor* entry(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  const nlohmann::json& config() const { return config_; }  // config.json
  std::string dir() const { return dir_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }  // one per shard, in shard order

 private:
  std::string dir_;
  nlohmann::json config_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::pair<size_t, size_t>> index_;  // name -> (file, tensor within file)
};

}  // namespace ferry
