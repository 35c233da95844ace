// Public helpers for front ends (the ferry command line, scripts, tests) beyond the engine API: input text
// validation and the random-weight model writer behind `ferry gen`. Front ends include only include/ferry
// (docs/architecture.md, "Boundaries"); this header is how they reach these pieces of the libraries.
#pragma once

#include <cstdint>
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
  std::string path;                 // output .gguf file
  std::string shape = "tiny";       // one of random_model_shape_names()
  std::string weight_type = "q4_0"; // matmul weights: f32, f16, bf16, q8_0, q4_0, q4_1 (norms stay f32)
  uint64_t seed = 1;
  int n_threads = 0;                // 0: all cores
};

// The known shapes: tiny, smollm2-135m, llama3-8b, qwen3-8b, llama3-70b.
std::vector<std::string> random_model_shape_names();
// Checks the spec (ferry::Error naming an unknown shape, with the known ones, or an unknown weight type, or a
// missing path) and returns the model's number of weights (for reports).
int64_t random_model_n_params(const RandomModelSpec& spec);
// Checks the spec like random_model_n_params, then writes the model (ferry::Error when the file cannot be
// written).
void gen_random_model(const RandomModelSpec& spec);

}  // namespace ferry
