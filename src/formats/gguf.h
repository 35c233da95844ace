// GGUF (versions 2 and 3): reader over an mmap (or any byte range) and a streaming writer.
// Layout: magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, n_kv × (string key, u32 type, value),
// n_tensors × (string name, u32 n_dims, n_dims × u64 ne (innermost first), u32 ggml type, u64 offset),
// padding to general.alignment (default 32), then the data section; tensor offsets are relative to it.
// Every size and offset read from the file is checked against the bytes present before use.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/tensor.h"

namespace ferry {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7,
  String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12,
};

struct GgufValue;
struct GgufArray {
  GgufType elem_type = GgufType::U8;
  std::vector<GgufValue> items;
};

// One metadata value. Integers are held widened (signed or unsigned as declared), floats as double;
// `type` keeps the declared GGUF type so a writer can round-trip it exactly.
struct GgufValue {
  GgufType type = GgufType::U8;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> value;

  static GgufValue u32(uint32_t v) { return {GgufType::U32, uint64_t(v)}; }
  static GgufValue i32(int32_t v) { return {GgufType::I32, int64_t(v)}; }
  static GgufValue u64(uint64_t v) { return {GgufType::U64, v}; }
  static GgufValue f32(float v) { return {GgufType::F32, double(v)}; }
  static GgufValue boolean(bool v) { return {GgufType::Bool, v}; }
  static GgufValue str(std::string v) { return {GgufType::String, std::move(v)}; }
  static GgufValue array(GgufType elem_type, std::vector<GgufValue> items) {
    return {GgufType::Array, GgufArray{elem_type, std::move(items)}};
  }
  static GgufValue strings(const std::vector<std::string>& v);
  static GgufValue i32s(const std::vector<int32_t>& v);
  static GgufValue f32s(const std::vector<float>& v);

  bool is_integer() const;
  bool is_number() const;  // integer or float
  // Accessors throw ferry::Error (naming the expected type) on a type mismatch.
  int64_t as_int() const;  // any integer type (u64 above INT64_MAX is an error)
  double as_float() const;  // any numeric type
  bool as_bool() const;
  const std::string& as_string() const;
  const GgufArray& as_array() const;
};

struct GgufTensorInfo {
  std::string name;
  DType dtype = DType::F32;
  int n_dims = 0;
  std::array<int64_t, kMaxDims> shape{};  // outermost first (GGUF's ne reversed)
  uint64_t offset = 0;                    // relative to the data section
  size_t nbytes = 0;
  const uint8_t* data = nullptr;          // into the mapped file

  Tensor view() const;  // a CPU tensor over the mapped bytes
};

class GgufFile {
 public:
  // Maps the file and parses it; throws ferry::Error with the path and the problem.
  static GgufFile open(const std::string& path);
  // Parses bytes owned by the caller (they must outlive the result). Used by tests and the fuzzer.
  static GgufFile parse(const uint8_t* data, size_t size, std::string name = "<memory>");

  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  const std::string& name() const { return name_; }
  size_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Typed lookups: missing key → default (or Error when no default is given); wrong type → Error.
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& def) const;
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_float(const std::string& key) const;
  double get_float(const std::string& key, double def) const;
  bool get_bool(const std::string& key, bool def) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;

 private:
  std::string name_;
  std::shared_ptr<MappedFile> file_;  // null when parsing caller-owned bytes
  size_t size_ = 0;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Where GgufWriter::write_split starts a new shard, gguf-split's --split-max-size and --split-max-tensors: a shard
// takes tensors in order until the next would pass either limit (each shard holds at least one); 0: no limit.
struct GgufSplitLimits {
  uint64_t max_bytes = 0;  // tensor data of one shard (each tensor padded to the alignment); metadata not counted
  int max_tensors = 0;
};

// Writes a GGUF v3 file. Tensor data is produced on demand by a fill callback while writing, so files far
// larger than memory (a 70B model from `ferry gen`) stream out one tensor at a time.
class GgufWriter {
 public:
  using Fill = std::function<void(uint8_t* dst, size_t nbytes)>;

  explicit GgufWriter(size_t alignment = 32);
  void set(const std::string& key, GgufValue value);  // replaces an existing key
  // shape outermost first; nbytes is derived from dtype and shape.
  void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, Fill fill);
  void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data);
  void write(const std::string& path) const;    // throws ferry::Error on I/O failure
  // Writes the model split as llama.cpp's gguf-split does (formats/gguf_split.h): PREFIX-00001-of-0000N.gguf, ...
  // (a set of one when everything fits), the metadata in shard 1, split.no / split.count / split.tensors.count in
  // every shard. Returns the paths written, in order.
  std::vector<std::string> write_split(const std::string& prefix, const GgufSplitLimits& limits) const;
  std::vector<uint8_t> to_bytes() const;        // whole file in memory (tests, small models)

 private:
  struct PendingTensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    size_t nbytes;
    Fill fill;
  };
  using Metadata = std::vector<std::pair<std::string, GgufValue>>;
  // One file of metadata `kv` and tensors_[first, end) (offsets counted from the first of them).
  void write_to(const std::function<void(const void*, size_t)>& sink, const Metadata& kv, size_t first,
                size_t end) const;
  void write_file(const std::string& path, const Metadata& kv, size_t first, size_t end) const;

  size_t alignment_;
  Metadata kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace ferry
