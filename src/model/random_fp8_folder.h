// `ferry gen --type fp8|fp8-block|fp8-tensor`: a random-weight model of a named shape as a Hugging Face FP8 folder
// (config.json with its quantization_config, model.safetensors, tokenizer.json + tokenizer_config.json of the
// random models' synthetic vocabulary), in one of the three layouts model/fp8_weights.h reads:
//  - fp8 (per-channel): compressed-tensors, weights strategy channel (F32 weight_scale (rows, 1)), dynamic
//    per-token activations: llm-compressor's FP8_DYNAMIC;
//  - fp8-block: quant_method fp8, weight_block_size [128, 128], F32 weight_scale_inv per block (DeepSeek-V3);
//  - fp8-tensor: quant_method fp8 without a block size, one F32 weight_scale per weight.
// Every q/k/v/o/gate/up/down weight is F8_E4M3 (the values write_random_model draws, scaled by amax / 448 of the
// row, block or tensor, rounded to nearest even); embeddings, lm_head and norms are BF16 (lm_head is not
// quantized, as llm-compressor leaves it). Tensors are written one at a time.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"
#include "model/fp8_weights.h"
#include "model/random_model.h"

namespace ferry {

// The layout of a gen type name: "fp8" (per-channel), "fp8-block", "fp8-tensor"; nullopt for other names.
std::optional<Fp8Layout> fp8_gen_layout(const std::string& type);

// dir is created (it must not hold a model already: an existing config.json is an error). on_tensor(done, count)
// after each safetensors entry (a weight and its scale are two) is written, for a progress line.
void write_random_fp8_folder(const std::string& dir, const ModelConfig& config, Fp8Layout layout, uint64_t seed,
                             int n_threads = 0, const TensorDoneFn& on_tensor = {});

}  // namespace ferry
