// FP8 checkpoints (Hugging Face safetensors with F8_E4M3 weights). At load every FP8 weight becomes a tensor of
// ferry's F8_E4M3_B128 blocks (formats/quant.h: 128 e4m3 codes as stored + the f32 scale of those 128 values; 1.03
// bytes a weight on every backend), its scale tensor consumed; a value is e4m3 decoded bit-exactly (formats/fp8.h)
// times its scale in f32, the value torch computes for weight.to(float32) * scale. A weight whose rows do not split
// into 128-value blocks of one scale each (columns not a multiple of 128, or block-wise scales over column blocks
// that are not a multiple of 128 wide) is dequantized to f32 instead (the same values, 4 bytes a weight; the
// "fp8" fact of the model file says how many). The three layouts in use:
//  - block-wise: config.json quantization_config {quant_method: "fp8", weight_block_size: [br, bc]} (DeepSeek-V3,
//    Qwen3-FP8); W (rows, cols) F8_E4M3 and W_scale_inv (ceil(rows/br), ceil(cols/bc)): w[r][c] = W[r][c] *
//    scale_inv[r/br][c/bc];
//  - per-channel: {quant_method: "compressed-tensors", config_groups: {*: {weights: {type: "float", num_bits: 8,
//    strategy: "channel"}, input_activations: {strategy: "token", dynamic: true}}}} (llm-compressor's FP8_DYNAMIC);
//    W_scale (rows, 1): w[r][c] = W[r][c] * scale[r];
//  - per-tensor: compressed-tensors strategy "tensor", or quant_method "fp8" without weight_block_size; W_scale one
//    value (shape (), (1) or (1, 1)): w = W * scale. A static input_scale is read past (the reference path does not
//    quantize activations; per-token dynamic activations have none).
//    compressed-tensors strategy "block" (block_structure [br, bc], W_scale per block) reads as block-wise.
// A corrupt or inconsistent folder (an FP8 weight without its scale, a scale of the wrong shape or type, F8 weights
// without a quantization_config, another quantization method) is a ferry::Error naming the tensor.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ferry {

class SafetensorsModel;

enum class Fp8Layout { BlockWise, PerChannel, PerTensor };

struct Fp8Scheme {
  Fp8Layout layout = Fp8Layout::BlockWise;
  int block_rows = 128, block_cols = 128;  // BlockWise only
  std::string scale_suffix;                // appended to the weight's name: "_scale_inv" or "_scale"
};

// The scheme config.json declares; nullopt when it declares no quantization. ferry::Error for a quantization
// ferry cannot read (another method, an FP8 type other than 8-bit float weights).
std::optional<Fp8Scheme> fp8_scheme(const nlohmann::json& config);
const char* fp8_layout_name(Fp8Layout layout);  // "block-wise 128x128" style names are built by callers

// True for a weight's FP8 side tensors (name ends in weight_scale_inv, weight_scale or input_scale).
bool is_fp8_side_tensor(const std::string& name);

// The f32 values of the F8_E4M3 weight `name` ((rows, cols), row-major) with its scale, checked as above.
std::vector<float> dequantize_fp8_weight(const SafetensorsModel& st, const std::string& name, const Fp8Scheme& scheme);

// Whether a weight of `cols` columns under `scheme` maps exactly onto F8_E4M3_B128 blocks (one scale per block).
bool fp8_maps_to_blocks(const Fp8Scheme& scheme, int64_t cols);

// The F8_E4M3_B128 bytes of the F8_E4M3 weight `name` (rows, cols): (rows, cols / 128) blocks, row-major; the codes
// as stored, each block's scale from the layout. Checked as dequantize_fp8_weight; ferry::Error when
// !fp8_maps_to_blocks(scheme, cols).
std::vector<uint8_t> fp8_weight_blocks(const SafetensorsModel& st, const std::string& name, const Fp8Scheme& scheme);

}  // namespace ferry
