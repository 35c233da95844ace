// SafetensorsFile: parses and validates one .safetensors file (see safetensors.h for the layout).
#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <string_view>

#include "core/check.h"
#include "formats/safetensors.h"

namespace ferry {
namespace {

// The safetensors library refuses headers above 100 MB; real ones are a few hundred KB at most.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr size_t kMaxFileDims = 64;  // more dimensions than this is a corrupt header, not a tensor

struct FileDType {
  std::string_view name;
  int bits;                   // bits per element
  std::optional<DType> dtype;  // nullopt: a valid safetensors type that ferry does not compute with
};

// Every dtype the safetensors format defines.
constexpr FileDType kFileDTypes[] = {
    {"F32", 32, DType::F32},   {"F16", 16, DType::F16},   {"BF16", 16, DType::BF16},
    {"F64", 64, DType::F64},   {"I64", 64, DType::I64},   {"I32", 32, DType::I32},
    {"I16", 16, DType::I16},   {"I8", 8, DType::I8},      {"U8", 8, std::nullopt},
    {"U16", 16, std::nullopt}, {"U32", 32, std::nullopt}, {"U64", 64, std::nullopt},
    {"BOOL", 8, std::nullopt}, {"F8_E4M3", 8, std::nullopt}, {"F8_E5M2", 8, std::nullopt},
    {"F8_E8M0", 8, std::nullopt}, {"F6_E2M3", 6, std::nullopt}, {"F6_E3M2", 6, std::nullopt},
    {"F4", 4, std::nullopt},   {"C64", 64, std::nullopt},
};

const FileDType* find_file_dtype(std::string_view name) {
  for (const FileDType& d : kFileDTypes)
    if (d.name == name) return &d;
  return nullptr;
}

std::string shape_string(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// A header is {name: {dtype, shape: [...], data_offsets: [...]}, __metadata__: {...}}: 3 levels deep.
constexpr size_t kMaxHeaderDepth = 8;

// The deepest nesting of [ and { outside strings, counting stops past `limit`. Checked before parsing:
// nlohmann's DOM spends ~70 bytes per '[' (10 MB of them took 890 MB) and its destructor recurses; flat
// values cost at most ~16 bytes per input byte.
size_t json_depth(const uint8_t* begin, size_t n, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = char(begin[i]);
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// Parses the JSON header, rejecting duplicate top-level keys (nlohmann would silently keep the last).
nlohmann::json parse_header(const uint8_t* begin, size_t n, const std::string& file) {
  FERRY_CHECK(json_depth(begin, n, kMaxHeaderDepth) <= kMaxHeaderDepth, "{}: malformed JSON header: nested deeper than {} levels",
              file, kMaxHeaderDepth);
  std::string duplicate;
  std::set<std::string> seen;
  const nlohmann::json::parser_callback_t on_event = [&](int depth, nlohmann::json::parse_event_t event,
                                                         nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(begin, begin + n, on_event);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON header: {}", file, e.what());
  }
  FERRY_CHECK(duplicate.empty(), "{}: header lists '{}' twice", file, duplicate);
  FERRY_CHECK(header.is_object(), "{}: header is not a JSON object", file);
  return header;
}

std::map<std::string, std::string> parse_metadata(const nlohmann::json& j, const std::string& file) {
  FERRY_CHECK(j.is_object(), "{}: __metadata__ is not an object", file);
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : j.items()) {
    FERRY_CHECK(value.is_string(), "{}: __metadata__ value for '{}' is not a string", file, key);
    out[key] = value.get<std::string>();
  }
  return out;
}

uint64_t read_u64(const nlohmann::json& v, const std::string& file, const std::string& tensor, const char* field) {
  FERRY_CHECK(v.is_number_unsigned(), "{}: tensor '{}': {} must hold non-negative integers, got {}", file, tensor,
              field, v.dump());
  return v.get<uint64_t>();
}

// Validates one header entry against the data section (data_size bytes at data) and returns it.
// begin_out receives the entry's start offset (for the overlap check).
SafetensorsTensor parse_entry(const std::string& name, const nlohmann::json& j, const uint8_t* data, uint64_t data_size,
                              const std::string& file, uint64_t& begin_out) {
  FERRY_CHECK(j.is_object(), "{}: entry for tensor '{}' is not an object", file, name);
  const auto dtype_it = j.find("dtype");
  const auto shape_it = j.find("shape");
  const auto offsets_it = j.find("data_offsets");
  FERRY_CHECK(dtype_it != j.end() && dtype_it->is_string(), "{}: tensor '{}' has no string 'dtype'", file, name);
  FERRY_CHECK(shape_it != j.end() && shape_it->is_array(), "{}: tensor '{}' has no 'shape' array", file, name);
  FERRY_CHECK(offsets_it != j.end() && offsets_it->is_array() && offsets_it->size() == 2,
              "{}: tensor '{}' needs 'data_offsets' as [begin, end]", file, name);

  SafetensorsTensor t;
  t.name = name;
  t.file_dtype = dtype_it->get<std::string>();
  const FileDType* fd = find_file_dtype(t.file_dtype);
  FERRY_CHECK(fd != nullptr, "{}: tensor '{}' has unknown dtype '{}'", file, name, t.file_dtype);

  FERRY_CHECK(shape_it->size() <= kMaxFileDims, "{}: tensor '{}' has {} dimensions", file, name, shape_it->size());
  std::vector<uint64_t> dims;
  uint64_t numel = 1;
  for (const auto& d : *shape_it) {
    dims.push_back(read_u64(d, file, name, "shape"));
    FERRY_CHECK(!__builtin_mul_overflow(numel, dims.back(), &numel) &&
                    numel <= uint64_t(std::numeric_limits<int64_t>::max()),
                "{}: tensor '{}': shape {} has too many elements", file, name, shape_string(dims));
  }
  uint64_t bits = 0;
  FERRY_CHECK(!__builtin_mul_overflow(numel, uint64_t(fd->bits), &bits),
              "{}: tensor '{}': shape {} of {} is too large", file, name, shape_string(dims), t.file_dtype);
  FERRY_CHECK(bits % 8 == 0, "{}: tensor '{}': shape {} of {} is not a whole number of bytes", file, name,
              shape_string(dims), t.file_dtype);
  const uint64_t begin = read_u64((*offsets_it)[0], file, name, "data_offsets");
  const uint64_t end = read_u64((*offsets_it)[1], file, name, "data_offsets");
  FERRY_CHECK(begin <= end, "{}: tensor '{}': data_offsets [{}, {}] are out of order", file, name, begin, end);
  FERRY_CHECK(end <= data_size, "{}: tensor '{}': data_offsets [{}, {}] run past the data section ({} bytes)", file,
              name, begin, end, data_size);
  FERRY_CHECK(end - begin == bits / 8, "{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets [{}, {}] span {}",
              file, name, shape_string(dims), t.file_dtype, bits / 8, begin, end, end - begin);
  t.data = data + begin;
  t.nbytes = size_t(end - begin);
  begin_out = begin;

  if (!fd->dtype) {
    t.unsupported = "unsupported dtype " + t.file_dtype + " for tensor '" + name + "'";
  } else if (dims.size() > size_t(kMaxDims)) {
    t.unsupported = "tensor '" + name + "' has " + std::to_string(dims.size()) + " dimensions; ferry supports at most " +
                    std::to_string(kMaxDims);
  } else {
    t.dtype = *fd->dtype;
  }
  t.n_dims = int(std::min(dims.size(), size_t(kMaxDims)));
  for (int i = 0; i < t.n_dims; ++i) t.shape[i] = int64_t(dims[i]);
  return t;
}

}  // namespace

Tensor SafetensorsTensor::view() const {
  FERRY_CHECK(supported(), "{}", unsupported);
  const size_t elem = size_t(dtype_info(dtype).block_bytes);
  FERRY_CHECK(reinterpret_cast<uintptr_t>(data) % elem == 0,
              "tensor '{}': data is not aligned to its {}-byte elements (header not padded)", name, elem);
  Tensor t;
  t.dtype = dtype;
  t.n_dims = n_dims;
  t.shape = shape;
  t.data = const_cast<uint8_t*>(data);
  return t;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path);
  SafetensorsFile f = parse(file->data(), file->size(), path);
  f.file_ = std::move(file);
  return f;
}

SafetensorsFile SafetensorsFile::parse(const uint8_t* data, size_t size, std::string name) {
  SafetensorsFile f;
  f.name_ = std::move(name);
  const std::string& file = f.name_;
  FERRY_CHECK(size >= 8, "{}: not a safetensors file: {} bytes, too short for the header length", file, size);
  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);  // little-endian, as every platform ferry runs on
  FERRY_CHECK(header_len <= size - 8, "{}: header length {} runs past the end of the file ({} bytes)", file,
              header_len, size);
  FERRY_CHECK(header_len <= kMaxHeaderBytes, "{}: header length {} is over the {}-byte limit", file, header_len,
              kMaxHeaderBytes);
  FERRY_CHECK(header_len >= 2, "{}: header of {} bytes is too short for a JSON object", file, header_len);
  f.data_offset_ = size_t(8 + header_len);
  const uint8_t* section = data + f.data_offset_;
  const uint64_t section_size = size - f.data_offset_;

  const nlohmann::json header = parse_header(data + 8, size_t(header_len), file);
  std::vector<std::pair<uint64_t, SafetensorsTensor>> entries;  // (begin offset, tensor)
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      f.metadata_ = parse_metadata(value, file);
      continue;
    }
    uint64_t begin = 0;
    SafetensorsTensor t = parse_entry(key, value, section, section_size, file, begin);
    entries.emplace_back(begin, std::move(t));
  }

  // Data order; then no two non-empty byte ranges may share a byte.
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second.nbytes < b.second.nbytes;
  });
  uint64_t covered_end = 0;
  const SafetensorsTensor* last = nullptr;
  for (const auto& [begin, t] : entries) {
    if (t.nbytes == 0) continue;
    FERRY_CHECK(last == nullptr || begin >= covered_end, "{}: tensors '{}' and '{}' overlap in the data section", file,
                last->name, t.name);
    covered_end = begin + t.nbytes;
    last = &t;
  }
  f.tensors_.reserve(entries.size());
  for (auto& [begin, t] : entries) {
    f.index_[t.name] = f.tensors_.size();
    f.tensors_.push_back(std::move(t));
  }
  return f;
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) return nullptr;
  const SafetensorsTensor& t = tensors_[it->second];
  FERRY_CHECK(t.supported(), "{}: {}", name_, t.unsupported);
  return &t;
}

}  // namespace ferry
