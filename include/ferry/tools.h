// Public helpers for front ends (the ferry command line, scripts, tests) beyond the engine API: input text
// validation, the random-weight model writer behind `ferry gen` and the quantizer behind `ferry quantize`. Front ends include only include/ferry
// (docs/architecture.md, "Boundaries"); this header is how they reach these pieces of the libraries.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

// True when the whole text is well-formed UTF-8 (RFC 3629: no overlongs, no surrogates, nothing above
// U+10FFFF). The same function the tokenizer uses (declared also in src/tokenizer/utf8.h, defined there).
bool is_valid_utf8(std::string_view text);

// A random-weight model of a real shape, written as GGUF (weights drawn like a trained model's, std 0.02,
// never zeros; a synthetic byte-level vocabulary so it loads, tokenizes and generates visible text).
struct RandomModelSpec {
  std::string path;                 // output .gguf file (a folder for the fp8 types)
  std::string shape = "tiny";       // one of random_model_shape_names()
  std::string weight_type = "q4_0"; // matmul weights: f32, f16, bf16, q8_0, q4_0, q4_1 (embeddings q8_0 for the
                                    // quantized ones), or any quantize_type_names() entry (q5_0 ... q6_k,
                                    // q3_k_m, q4_k_m, q5_k_m: typed as `ferry quantize` types them); norms stay f32;
                                    // or fp8 / fp8-block / fp8-tensor: a Hugging Face FP8 folder at `path`
                                    // (per-channel, 128x128 blocks, per-tensor; src/model/random_fp8_folder.h)
  uint64_t seed = 1;
  int n_threads = 0;                // 0: all cores
  // After each tensor is made and written (done of count; for a progress line); an fp8 folder counts its
  // safetensors entries (a weight and its scale are two).
  std::function<void(int done, int count)> on_tensor{};
  // A split GGUF (llama.cpp's gguf-split layout) instead of one file when either is > 0: PREFIX-00001-of-0000N.gguf
  // ..., PREFIX `path` without its ".gguf"; a shard takes tensors until the next would pass split_max_bytes of
  // tensor data or split_max_tensors tensors. Not for the fp8 folders.
  uint64_t split_max_bytes = 0;
  int split_max_tensors = 0;
};

// The known shapes: tiny, smollm2-135m, llama3-8b, qwen3-8b, llama3-70b.
std::vector<std::string> random_model_shape_names();
// Checks the spec (ferry::Error naming an unknown shape, with the known ones, or an unknown weight type, or a
// missing path) and returns the model's number of weights (for reports).
int64_t random_model_n_params(const RandomModelSpec& spec);
// Checks the spec like random_model_n_params, then writes the model (ferry::Error when the file cannot be
// written). Returns the files written (the shards of a split GGUF in order; the folder of an fp8 model).
std::vector<std::string> gen_random_model(const RandomModelSpec& spec);

// `ferry quantize IN OUT TYPE`: IN a .gguf file or a Hugging Face folder (F32/F16/BF16 safetensors), OUT a GGUF
// file of one type or a llama.cpp-style mix (src/model/quant_mix.h has the per-tensor rules).
struct QuantizeSpec {
  std::string input;
  std::string output;
  std::string type;   // one of quantize_type_names(), any case
  int n_threads = 0;  // 0: all cores
};
// One written tensor, for a progress line.
struct QuantizeProgress {
  int index = 0, count = 0;  // 1-based
  std::string name;          // GGUF tensor name
  std::string shape;         // "(rows, cols)"
  std::string from, to;      // type names as llama.cpp prints them ("bf16", "q4_K")
  size_t bytes_in = 0, bytes_out = 0;
};
struct QuantizeTotals {
  int n_tensors = 0;
  size_t bytes_in = 0, bytes_out = 0;
};
// F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q3_K_M, Q4_K_M, Q5_K_M.
std::vector<std::string> quantize_type_names();
// Throws ferry::Error naming the problem; on_tensor (may be empty) is called after each tensor is written.
QuantizeTotals quantize(const QuantizeSpec& spec, const std::function<void(const QuantizeProgress&)>& on_tensor);

}  // namespace ferry
