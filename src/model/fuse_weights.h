// Fused projection weights: matmul weights that read the same input concatenated by rows, so one matmul does
// the work of several (wq|wk|wv -> wqkv, w_gate|w_up -> w_gate_up). Rows of every stored type are independent
// (GGUF blocks run along a row), so stacking rows is exact for any dtype as long as the parts share it.
// load_weights calls these after the tensor-parallel plan has cut the parts (a rank's fused wqkv is
// [its q rows; its k rows; its v rows]) and before Backend::prepare_weight, so the backend uploads the fused
// tensor once.
#pragma once

#include <span>
#include <vector>

#include "ops/backend.h"

namespace ferry {

// Whether `parts` (host tensors) can be stacked by rows: all 2-D, one dtype, one column count, none empty.
bool can_fuse_rows(std::span<const Tensor* const> parts);

// The parts stacked by rows, prepared by the backend: a host copy (rows of parts[0], then parts[1], ...:
// (sum of rows, cols) in the parts' dtype) goes through backend.prepare_weight; the copy is kept in `keep`
// only when the prepared tensor points into it (a backend that uses host memory in place), else freed on
// return. Precondition: can_fuse_rows(parts).
Tensor prepare_fused_rows(Backend& backend, std::span<const Tensor* const> parts, std::vector<DeviceBuffer>& keep);

// Fused bias: the f32 parts one after another; an empty part contributes `lengths[i]` zeros (a projection
// without a bias adds nothing). parts and lengths have one entry per projection.
std::vector<float> concat_f32(std::span<const std::vector<float>* const> parts, std::span<const int64_t> lengths);

}  // namespace ferry
