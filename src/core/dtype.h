// Element types ferry stores: plain floats, integers, and GGML's quantized block formats.
// A quantized type packs block_elems values into block_bytes; rows are whole numbers of blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ferry {

enum class DType : uint8_t {
  F32, F16, BF16,
  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
  Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K,
  I8, I16, I32, I64, F64,
  // Internal activation formats of the CPU dot kernels (not GGUF file types; ggml_id -1):
  Q8_0G4, Q8_1G4,
  // FP8 checkpoint weights kept as stored (not a GGUF file type; ggml_id -1): a block = 128 e4m3 codes then one
  // f32 scale (formats/quant.h BlockF8E4M3B128), value = e4m3(q) * scale.
  F8_E4M3_B128,
  // A backend's stack of row ranges of different types (model/fuse_weights.h: a K-quant mix's q|k|v, q|k in Q4_K and
  // v in Q6_K): no element layout of its own, so nothing reads it by its dtype; the backend that prepared it keeps
  // its parts (CudaBackend::prepare_stacked_weight). Not a file type (ggml_id -1); row_bytes is 0.
  Stacked,
};

struct DTypeInfo {
  std::string_view name;  // as llama.cpp prints it: "f32", "q4_0", "q4_K"
  int block_elems;        // values per block (1 for plain types)
  int block_bytes;        // bytes per block
  int ggml_id;            // GGUF tensor type id; -1 for ferry's internal types (never read from files)
  bool quantized;
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
inline bool is_quantized(DType t) { return dtype_info(t).quantized; }
std::optional<DType> dtype_from_ggml(uint32_t ggml_id);
std::optional<DType> dtype_from_name(std::string_view name);  // "q4_0", "Q4_0", "bf16", ...

// Bytes of n values of type t; throws ferry::Error if n is not a whole number of blocks or overflows.
size_t row_bytes(DType t, int64_t n);

}  // namespace ferry
