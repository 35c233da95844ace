// Fused projection weights: matmul weights that read the same input concatenated by rows, so one matmul does
// the work of several (wq|wk|wv -> wqkv, w_gate|w_up -> w_gate_up). Rows of every stored type are independent
// (GGUF blocks run along a row), so stacking rows is exact for any dtype as long as the parts share it; parts of
// different types (a K-quant mix's q|k in Q4_K and v in Q6_K) stack as row ranges that keep their own types, where
// the backend reads such a stack (Backend::prepare_stacked_weight).
// load_weights calls these after the tensor-parallel plan has cut the parts (a rank's fused wqkv is
// [its q rows; its k rows; its v rows]) and before Backend::prepare_weight, so the backend uploads the fused
// tensor once.
#pragma once

#include <span>
#include <utility>
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

// Whether `parts` (host tensors) can be stacked by rows whatever their types: all 2-D, one column count, none empty.
// Parts of different types go to Backend::prepare_stacked_weight (prepare_stacked_rows), which may decline.
bool can_stack_rows(std::span<const Tensor* const> parts);

// The runs of consecutive parts of one type, as [first, last) part indices: q(Q4_K), k(Q4_K), v(Q6_K) -> {0, 2},
// {2, 3}.
std::vector<std::pair<size_t, size_t>> type_runs(std::span<const Tensor* const> parts);

// The parts stacked by rows when their types differ: each run of one type becomes one host tensor (its parts' rows
// in order, copied where the run has more than one part), and the runs go to backend.prepare_stacked_weight, which
// copies them (the host copies are freed on return). Empty where the backend declines. Precondition:
// can_stack_rows(parts).
Tensor prepare_stacked_rows(Backend& backend, std::span<const Tensor* const> parts, std::vector<DeviceBuffer>& keep);

// Fused bias: the f32 parts one after another; an empty part contributes `lengths[i]` zeros (a projection
// without a bias adds nothing). parts and lengths have one entry per projection.
std::vector<float> concat_f32(std::span<const std::vector<float>* const> parts, std::span<const int64_t> lengths);

}  // namespace ferry
