// `ferry quantize`: a model (a GGUF file, or a Hugging Face folder of F32/F16/BF16 safetensors, or an FP8 one:
// model/fp8_weights.h, its weights dequantized first) rewritten as one
// GGUF file whose matrices are of one type or of a llama.cpp-style mix (model/quant_mix.h). Metadata and the
// tokenizer are complete (a Hugging Face folder's are converted as convert_hf_to_gguf.py writes them,
// model/gguf_export.h), so the output loads in other GGUF readers. Tensors are streamed one at a time (only
// one tensor's output is in memory), each quantized by rows over a thread pool.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ferry {

// One tensor as it is written, for a progress line.
struct QuantizedTensor {
  int index = 0, count = 0;        // 1-based position, number of tensors
  std::string name;                // GGUF name
  std::vector<int64_t> shape;      // outermost first
  DType from = DType::F32, to = DType::F32;
  size_t bytes_in = 0, bytes_out = 0;
};

struct QuantizeModelOptions {
  std::string input;    // .gguf file or Hugging Face folder
  std::string output;   // .gguf file
  std::string type;     // a quant_target_names() entry, any case
  int n_threads = 0;    // 0: all cores
  std::function<void(const QuantizedTensor&)> on_tensor;  // after each tensor is written (may be empty)
};

struct QuantizeSummary {
  int n_tensors = 0;
  size_t bytes_in = 0, bytes_out = 0;  // tensor data only
};

// Throws ferry::Error naming the problem (unknown type, unreadable input, a tensor type ferry cannot read, a
// tensor without a GGUF name, an unwritable output).
QuantizeSummary quantize_model(const QuantizeModelOptions& options);

}  // namespace ferry
