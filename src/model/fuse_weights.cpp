#include "model/fuse_weights.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/check.h"

namespace ferry {

bool can_fuse_rows(std::span<const Tensor* const> parts) {
  if (parts.empty()) return false;
  const Tensor& first = *parts[0];
  for (const Tensor* t : parts) {
    if (t->empty() || t->n_dims != 2 || t->dtype != first.dtype || t->cols() != first.cols() || t->rows() <= 0)
      return false;
    if (t->device != Device::Cpu) return false;
  }
  return true;
}

Tensor prepare_fused_rows(Backend& backend, std::span<const Tensor* const> parts, std::vector<DeviceBuffer>& keep) {
  FERRY_ASSERT(can_fuse_rows(parts));
  const DType dt = parts[0]->dtype;
  const int64_t cols = parts[0]->cols();
  int64_t rows = 0;
  size_t bytes = 0;
  for (const Tensor* t : parts) {
    rows += t->rows();
    bytes += t->nbytes();
  }
  // Host copy: (rows, cols) in dt, parts in order. Plain host memory (the CPU allocation), not page-locked:
  // a GPU backend copies it once in prepare_weight.
  auto* p = new uint8_t[std::max<size_t>(bytes, 1)];
  DeviceBuffer host(p, bytes, Device::Cpu, [](void* q) { delete[] static_cast<uint8_t*>(q); });
  size_t off = 0;
  for (const Tensor* t : parts) {
    std::memcpy(p + off, t->data, t->nbytes());
    off += t->nbytes();
  }
  const Tensor fused = Tensor::make(dt, {rows, cols}, p, Device::Cpu);
  Tensor prepared = backend.prepare_weight(fused, keep);
  const auto* d = static_cast<const uint8_t*>(prepared.data);
  if (d >= p && d < p + bytes) keep.push_back(std::move(host));  // used in place: keep the copy alive
  return prepared;
}

bool can_stack_rows(std::span<const Tensor* const> parts) {
  if (parts.empty()) return false;
  for (const Tensor* t : parts)
    if (t->empty() || t->n_dims != 2 || t->cols() != parts[0]->cols() || t->rows() <= 0 || t->device != Device::Cpu)
      return false;
  return true;
}

std::vector<std::pair<size_t, size_t>> type_runs(std::span<const Tensor* const> parts) {
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (runs.empty() || parts[i]->dtype != parts[runs.back().first]->dtype) runs.emplace_back(i, i);
    runs.back().second = i + 1;
  }
  return runs;
}

Tensor prepare_stacked_rows(Backend& backend, std::span<const Tensor* const> parts, std::vector<DeviceBuffer>& keep) {
  FERRY_ASSERT(can_stack_rows(parts));
  std::vector<Tensor> runs;
  std::vector<std::vector<uint8_t>> copies;  // a run of several parts: (its rows, cols) in its type
  copies.reserve(parts.size());
  for (const auto& [first, last] : type_runs(parts)) {
    if (last - first == 1) {
      runs.push_back(*parts[first]);
      continue;
    }
    int64_t rows = 0;
    std::vector<uint8_t>& bytes = copies.emplace_back();
    for (size_t i = first; i < last; ++i) {
      const auto* p = static_cast<const uint8_t*>(parts[i]->data);
      bytes.insert(bytes.end(), p, p + parts[i]->nbytes());
      rows += parts[i]->rows();
    }
    runs.push_back(Tensor::make(parts[first]->dtype, {rows, parts[first]->cols()}, bytes.data(), Device::Cpu));
  }
  return backend.prepare_stacked_weight(runs, keep);
}

std::vector<float> concat_f32(std::span<const std::vector<float>* const> parts, std::span<const int64_t> lengths) {
  FERRY_ASSERT(parts.size() == lengths.size());
  std::vector<float> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i]->empty()) {
      out.insert(out.end(), size_t(lengths[i]), 0.0f);
    } else {
      FERRY_ASSERT(int64_t(parts[i]->size()) == lengths[i]);
      out.insert(out.end(), parts[i]->begin(), parts[i]->end());
    }
  }
  return out;
}

}  // namespace ferry
