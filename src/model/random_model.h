// Random-weight models of real shapes, written as GGUF: for tests (tiny) and benchmarks (8B, 70B shapes).
// Speed and memory traffic do not depend on the weight values, but the values are never zeros: they are
// drawn like a trained model's (normal-ish, std 0.02) so kernels see realistic data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace ferry {

std::vector<std::string> random_model_shapes();  // tiny, smollm2-135m, llama3-8b, qwen3-8b, llama3-70b
// The config of a named shape; throws ferry::Error listing the known names.
ModelConfig random_model_config(const std::string& shape);

// Writes a GGUF model with a synthetic byte-level vocabulary (a few specials, 256 byte tokens, letter merges, the
// rest plain words " w<id>") so that it loads, tokenizes and generates visible text like a real one.
// weight_type: F32, F16, BF16, Q8_0, Q4_0, Q4_1 (matmul weights); norms stay F32.
void write_random_model(const std::string& path, const ModelConfig& config, DType weight_type, uint64_t seed,
                        int n_threads = 0);

}  // namespace ferry
