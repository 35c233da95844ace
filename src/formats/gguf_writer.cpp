// GGUF v3 writer: metadata, tensor infos, aligned data section streamed tensor by tensor.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/check.h"
#include "formats/gguf.h"

namespace ferry {
namespace {

using Sink = std::function<void(const void*, size_t)>;

template <typename T>
void put(const Sink& sink, T v) {
  sink(&v, sizeof(T));
}
void put_string(const Sink& sink, const std::string& s) {
  put<uint64_t>(sink, s.size());
  sink(s.data(), s.size());
}

void put_value(const Sink& sink, const GgufValue& v) {
  switch (v.type) {
    case GgufType::U8: put<uint8_t>(sink, uint8_t(v.as_int())); break;
    case GgufType::I8: put<int8_t>(sink, int8_t(v.as_int())); break;
    case GgufType::U16: put<uint16_t>(sink, uint16_t(v.as_int())); break;
    case GgufType::I16: put<int16_t>(sink, int16_t(v.as_int())); break;
    case GgufType::U32: put<uint32_t>(sink, uint32_t(v.as_int())); break;
    case GgufType::I32: put<int32_t>(sink, int32_t(v.as_int())); break;
    case GgufType::U64: put<uint64_t>(sink, std::get<uint64_t>(v.value)); break;
    case GgufType::I64: put<int64_t>(sink, v.as_int()); break;
    case GgufType::F32: put<float>(sink, float(v.as_float())); break;
    case GgufType::F64: put<double>(sink, v.as_float()); break;
    case GgufType::Bool: put<uint8_t>(sink, v.as_bool() ? 1 : 0); break;
    case GgufType::String: put_string(sink, v.as_string()); break;
    case GgufType::Array: {
      const GgufArray& a = v.as_array();
      put<uint32_t>(sink, uint32_t(a.elem_type));
      put<uint64_t>(sink, a.items.size());
      for (const GgufValue& item : a.items) {
        FERRY_CHECK(item.type == a.elem_type, "gguf writer: array element of type {} in an array of type {}",
                    uint32_t(item.type), uint32_t(a.elem_type));
        put_value(sink, item);
      }
      break;
    }
  }
}

}  // namespace

GgufWriter::GgufWriter(size_t alignment) : alignment_(alignment) {
  FERRY_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "gguf writer: alignment {} is not a power of two",
              alignment);
  if (alignment != 32) set("general.alignment", GgufValue::u32(uint32_t(alignment)));
}

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, Fill fill) {
  FERRY_CHECK(!shape.empty() && shape.size() <= size_t(kMaxDims), "gguf writer: tensor '{}' has {} dims", name,
              shape.size());
  FERRY_CHECK(dtype_info(dtype).ggml_id >= 0, "gguf writer: tensor '{}' has type {}, which is not a GGUF file type",
              name, dtype_name(dtype));
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  FERRY_CHECK(shape.back() % dtype_info(dtype).block_elems == 0,
              "gguf writer: tensor '{}' rows of {} values are not whole {} blocks", name, shape.back(), dtype_name(dtype));
  const size_t nbytes = row_bytes(dtype, numel);
  tensors_.push_back({name, dtype, std::move(shape), nbytes, std::move(fill)});
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data) {
  add_tensor(name, dtype, std::move(shape), [data](uint8_t* dst, size_t n) { std::memcpy(dst, data, n); });
}

void GgufWriter::write_to(const Sink& sink, const Metadata& kv, size_t first, size_t end) const {
  size_t written = 0;
  const Sink counting = [&](const void* p, size_t n) {
    sink(p, n);
    written += n;
  };
  const auto pad = [&] {
    static constexpr uint8_t kZeros[64] = {};
    size_t n = (alignment_ - written % alignment_) % alignment_;
    while (n > 0) {
      const size_t k = std::min(n, sizeof(kZeros));
      counting(kZeros, k);
      n -= k;
    }
  };

  counting("GGUF", 4);
  put<uint32_t>(counting, 3);
  put<uint64_t>(counting, end - first);
  put<uint64_t>(counting, kv.size());
  for (const auto& [key, value] : kv) {
    put_string(counting, key);
    put<uint32_t>(counting, uint32_t(value.type));
    put_value(counting, value);
  }
  uint64_t offset = 0;
  for (size_t i = first; i < end; ++i) {
    const PendingTensor& t = tensors_[i];
    put_string(counting, t.name);
    put<uint32_t>(counting, uint32_t(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put<uint64_t>(counting, uint64_t(*it));
    put<uint32_t>(counting, uint32_t(dtype_info(t.dtype).ggml_id));
    put<uint64_t>(counting, offset);
    offset += (t.nbytes + alignment_ - 1) / alignment_ * alignment_;
  }
  pad();
  std::vector<uint8_t> buf;
  for (size_t i = first; i < end; ++i) {
    const PendingTensor& t = tensors_[i];
    buf.assign(t.nbytes, 0);
    t.fill(buf.data(), t.nbytes);
    counting(buf.data(), buf.size());
    pad();
  }
}

void GgufWriter::write(const std::string& path) const { write_file(path, kv_, 0, tensors_.size()); }

void GgufWriter::write_file(const std::string& path, const Metadata& kv, size_t first, size_t end) const {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), std::fclose);
  FERRY_CHECK(f != nullptr, "cannot create '{}': {}", path, std::strerror(errno));
  write_to(
      [&](const void* p, size_t n) {
    FERRY_CHECK(std::fwrite(p, 1, n, f.get()) == n, "cannot write '{}': {}", path, std::strerror(errno));
      },
      kv, first, end);
  FERRY_CHECK(std::fflush(f.get()) == 0, "cannot write '{}': {}", path, std::strerror(errno));
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out;
  write_to([&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }, kv_, 0, tensors_.size());
  return out;
}

}  // namespace ferry
