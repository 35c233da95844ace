// GGUF reader: a bounds-checked cursor over the file bytes. Every count read from the file is checked
// against the bytes that remain before anything is allocated for it.
#include <cstring>
#include <limits>

#include "core/check.h"
#include "formats/gguf.h"

namespace ferry {
namespace {

constexpr uint32_t kMaxDepth = 4;               // nested arrays deeper than this are rejected
constexpr uint64_t kMaxStringBytes = 1u << 30;  // 1 GiB: no real metadata string is near this

class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& name) : data_(data), size_(size), name_(name) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const char* what) const {
    FERRY_CHECK(n <= remaining(), "{}: truncated file: {} needs {} bytes at offset {}, only {} remain", name_, what, n,
                pos_, remaining());
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    FERRY_CHECK(n <= kMaxStringBytes, "{}: {} has an absurd length {} at offset {}", name_, what, n, pos_ - 8);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(n));
    pos_ += size_t(n);
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& name_;
};

// Smallest number of bytes one element of a GGUF value type occupies (used to bound array counts).
uint64_t min_elem_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: case GgufType::String: return 8;
    case GgufType::Array: return 12;
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= uint32_t(GgufType::F64); }

GgufValue read_value(Cursor& c, GgufType type, uint32_t depth, const std::string& name, const std::string& key) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::U8: v.value = uint64_t(c.read<uint8_t>("u8 value")); break;
    case GgufType::I8: v.value = int64_t(c.read<int8_t>("i8 value")); break;
    case GgufType::U16: v.value = uint64_t(c.read<uint16_t>("u16 value")); break;
    case GgufType::I16: v.value = int64_t(c.read<int16_t>("i16 value")); break;
    case GgufType::U32: v.value = uint64_t(c.read<uint32_t>("u32 value")); break;
    case GgufType::I32: v.value = int64_t(c.read<int32_t>("i32 value")); break;
    case GgufType::U64: v.value = c.read<uint64_t>("u64 value"); break;
    case GgufType::I64: v.value = c.read<int64_t>("i64 value"); break;
    case GgufType::F32: v.value = double(c.read<float>("f32 value")); break;
    case GgufType::F64: v.value = c.read<double>("f64 value"); break;
    case GgufType::Bool: {
      const uint8_t b = c.read<uint8_t>("bool value");
      FERRY_CHECK(b <= 1, "{}: key '{}': bool value {} is neither 0 nor 1", name, key, b);
      v.value = b != 0;
      break;
    }
    case GgufType::String: v.value = c.read_string("string value"); break;
    case GgufType::Array: {
      FERRY_CHECK(depth < kMaxDepth, "{}: key '{}': arrays nested deeper than {}", name, key, kMaxDepth);
      const uint32_t et = c.read<uint32_t>("array element type");
      FERRY_CHECK(valid_type(et), "{}: key '{}': unknown array element type {}", name, key, et);
      const uint64_t n = c.read<uint64_t>("array length");
      const GgufType elem = GgufType(et);
      FERRY_CHECK(n <= c.remaining() / min_elem_bytes(elem),
                  "{}: key '{}': array of {} elements does not fit in the {} bytes left", name, key, n, c.remaining());
      GgufArray arr;
      arr.elem_type = elem;
      arr.items.reserve(size_t(n));
      for (uint64_t i = 0; i < n; ++i) arr.items.push_back(read_value(c, elem, depth + 1, name, key));
      v.value = std::move(arr);
      break;
    }
  }
  return v;
}

// Runs a typed accessor and, on a type mismatch, names the file and the key in the error.
template <typename F>
auto with_key(const std::string& file, const std::string& key, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    fail("{}: metadata key '{}': {}", file, key, e.what());
  }
}

}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path);
  GgufFile g = parse(file->data(), file->size(), path);
  g.file_ = std::move(file);
  return g;
}

GgufFile GgufFile::parse(const uint8_t* data, size_t size, std::string name) {
  GgufFile g;
  g.name_ = std::move(name);
  g.size_ = size;
  Cursor c(data, size, g.name_);

  FERRY_CHECK(size >= 4 && std::memcmp(data, "GGUF", 4) == 0, "{}: not a GGUF file (bad magic)", g.name_);
  c.read<uint32_t>("magic");
  g.version_ = c.read<uint32_t>("version");
  FERRY_CHECK(g.version_ == 2 || g.version_ == 3, "{}: unsupported GGUF version {} (ferry reads 2 and 3)", g.name_,
              g.version_);
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Each kv takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info at least 8 + 4 + 4 + 8.
  FERRY_CHECK(n_kv <= c.remaining() / 13, "{}: metadata count {} cannot fit in the file", g.name_, n_kv);
  FERRY_CHECK(n_tensors <= c.remaining() / 24, "{}: tensor count {} cannot fit in the file", g.name_, n_tensors);

  g.kv_.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string("metadata key");
    const uint32_t t = c.read<uint32_t>("metadata type");
    FERRY_CHECK(valid_type(t), "{}: key '{}' has unknown value type {}", g.name_, key, t);
    GgufValue v = read_value(c, GgufType(t), 0, g.name_, key);
    FERRY_CHECK(!g.kv_index_.count(key), "{}: duplicate metadata key '{}'", g.name_, key);
    g.kv_index_[key] = g.kv_.size();
    g.kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = g.find("general.alignment")) {
    const int64_t al = with_key(g.name_, "general.alignment", [&] { return a->as_int(); });
    FERRY_CHECK(al > 0 && al <= (1 << 20) && (al & (al - 1)) == 0,
                "{}: general.alignment {} is not a power of two (1..1 MiB)", g.name_, al);
    g.alignment_ = size_t(al);
  }

  g.tensors_.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo ti;
    ti.name = c.read_string("tensor name");
    const uint32_t n_dims = c.read<uint32_t>("tensor dims");
    FERRY_CHECK(n_dims >= 1 && n_dims <= uint32_t(kMaxDims), "{}: tensor '{}' has {} dimensions (1..{} supported)",
                g.name_, ti.name, n_dims, kMaxDims);
    ti.n_dims = int(n_dims);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.read<uint64_t>("tensor extent");
      FERRY_CHECK(ne <= uint64_t(std::numeric_limits<int64_t>::max()), "{}: tensor '{}' extent {} is too large",
                  g.name_, ti.name, ne);
      FERRY_CHECK(ne == 0 || numel <= uint64_t(std::numeric_limits<int64_t>::max()) / ne,
                  "{}: tensor '{}' element count overflows", g.name_, ti.name);
      numel *= ne;
      ti.shape[n_dims - 1 - d] = int64_t(ne);  // GGUF lists ne innermost first
    }
    const uint32_t type_id = c.read<uint32_t>("tensor type");
    const auto dt = dtype_from_ggml(type_id);
    FERRY_CHECK(dt.has_value(), "{}: tensor '{}' has unknown tensor type {}", g.name_, ti.name, type_id);
    ti.dtype = *dt;
    FERRY_CHECK(ti.shape[ti.n_dims - 1] % dtype_info(ti.dtype).block_elems == 0,
                "{}: tensor '{}' row of {} values is not a whole number of {} blocks", g.name_, ti.name,
                ti.shape[ti.n_dims - 1], dtype_name(ti.dtype));
    ti.nbytes = row_bytes(ti.dtype, int64_t(numel));
    ti.offset = c.read<uint64_t>("tensor offset");
    FERRY_CHECK(!g.tensor_index_.count(ti.name), "{}: duplicate tensor '{}'", g.name_, ti.name);
    g.tensor_index_[ti.name] = g.tensors_.size();
    g.tensors_.push_back(std::move(ti));
  }

  const size_t data_start = (c.pos() + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  FERRY_CHECK(g.tensors_.empty() || data_start <= size, "{}: data section starts past the end of the file", g.name_);
  for (GgufTensorInfo& ti : g.tensors_) {
    FERRY_CHECK(ti.offset % g.alignment_ == 0, "{}: tensor '{}' offset {} is not aligned to {}", g.name_, ti.name,
                ti.offset, g.alignment_);
    const uint64_t avail = size - data_start;
    FERRY_CHECK(ti.offset <= avail && ti.nbytes <= avail - ti.offset,
                "{}: tensor '{}' ({} bytes at offset {}) runs past the end of the file ({} bytes of data)", g.name_,
                ti.name, ti.nbytes, ti.offset, avail);
    ti.data = data + data_start + ti.offset;
  }
  return g;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  FERRY_CHECK(v, "{}: missing metadata key '{}'", name_, key);
  return with_key(name_, key, [&] { return v->as_string(); });
}
std::string GgufFile::get_string(const std::string& key, const std::string& def) const {
  const GgufValue* v = find(key);
  return v ? with_key(name_, key, [&] { return v->as_string(); }) : def;
}
int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  FERRY_CHECK(v, "{}: missing metadata key '{}'", name_, key);
  return with_key(name_, key, [&] { return v->as_int(); });
}
int64_t GgufFile::get_int(const std::string& key, int64_t def) const {
  const GgufValue* v = find(key);
  return v ? with_key(name_, key, [&] { return v->as_int(); }) : def;
}
double GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  FERRY_CHECK(v, "{}: missing metadata key '{}'", name_, key);
  return with_key(name_, key, [&] { return v->as_float(); });
}
double GgufFile::get_float(const std::string& key, double def) const {
  const GgufValue* v = find(key);
  return v ? with_key(name_, key, [&] { return v->as_float(); }) : def;
}
bool GgufFile::get_bool(const std::string& key, bool def) const {
  const GgufValue* v = find(key);
  return v ? with_key(name_, key, [&] { return v->as_bool(); }) : def;
}

Tensor GgufTensorInfo::view() const {
  Tensor t;
  t.dtype = dtype;
  t.n_dims = n_dims;
  t.shape = shape;
  t.data = const_cast<uint8_t*>(data);
  return t;
}

}  // namespace ferry
