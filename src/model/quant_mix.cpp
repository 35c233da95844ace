#include "model/quant_mix.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/check.h"

namespace ferry {
namespace {

struct TargetRow {
  const char* name;
  QuantMix mix;
  DType base;
  uint32_t file_type;  // llama.cpp's llama_ftype
};

constexpr TargetRow kTargets[] = {
    {"F32", QuantMix::OneType, DType::F32, 0},     {"F16", QuantMix::OneType, DType::F16, 1},
    {"BF16", QuantMix::OneType, DType::BF16, 32},  {"Q8_0", QuantMix::OneType, DType::Q8_0, 7},
    {"Q4_0", QuantMix::OneType, DType::Q4_0, 2},   {"Q4_1", QuantMix::OneType, DType::Q4_1, 3},
    {"Q5_0", QuantMix::OneType, DType::Q5_0, 8},   {"Q5_1", QuantMix::OneType, DType::Q5_1, 9},
    {"Q2_K", QuantMix::OneType, DType::Q2_K, 10},  {"Q3_K", QuantMix::OneType, DType::Q3_K, 11},
    {"Q4_K", QuantMix::OneType, DType::Q4_K, 14},  {"Q5_K", QuantMix::OneType, DType::Q5_K, 16},
    {"Q6_K", QuantMix::Q6_K, DType::Q6_K, 18},     {"Q3_K_M", QuantMix::Q3_K_M, DType::Q3_K, 12},
    {"Q4_K_M", QuantMix::Q4_K_M, DType::Q4_K, 15}, {"Q5_K_M", QuantMix::Q5_K_M, DType::Q5_K, 17},
};

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The layer index of a "blk.N." name, or -1.
int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  char* end = nullptr;
  const long l = std::strtol(name.c_str() + 4, &end, 10);
  return (end != name.c_str() + 4 && *end == '.') ? int(l) : -1;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// llama.cpp's fallback when a type's block does not divide the row.
DType fallback(DType t) {
  switch (t) {
    case DType::Q2_K: case DType::Q3_K: return DType::Q4_0;
    case DType::Q4_K: return DType::Q5_0;
    case DType::Q5_K: return DType::Q5_1;
    case DType::Q6_K: return DType::Q8_0;
    default: return DType::F16;
  }
}

}  // namespace

QuantTarget parse_quant_target(const std::string& name) {
  const std::string u = upper(name);
  for (const TargetRow& r : kTargets)
    if (u == r.name) return {r.name, r.mix, r.base, r.file_type};
  std::string known;
  for (const std::string& n : quant_target_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown quantization type '{}' (known: {})", name, known);
}

std::vector<std::string> quant_target_names() {
  std::vector<std::string> out;
  for (const TargetRow& r : kTargets) out.emplace_back(r.name);
  return out;
}

bool use_more_bits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

QuantPlanner::QuantPlanner(QuantTarget target, int n_layers, const std::vector<TensorShapeInfo>& tensors)
    : target_(std::move(target)), n_layers_(n_layers) {
  has_output_ = std::any_of(tensors.begin(), tensors.end(), [](const TensorShapeInfo& t) { return t.name == "output.weight"; });
}

DType QuantPlanner::mix_type(const std::string& name) const {
  const QuantMix mix = target_.mix;
  const DType base = target_.base;
  if (mix == QuantMix::OneType) return base;
  const int layer = layer_of(name);
  if (name == "output.weight" || (!has_output_ && name == "token_embd.weight")) return DType::Q6_K;
  if (contains(name, "attn_v.weight")) {
    DType t = base;
    if ((mix == QuantMix::Q4_K_M || mix == QuantMix::Q5_K_M) && use_more_bits(layer, n_layers_)) t = DType::Q6_K;
    if (mix == QuantMix::Q3_K_M) t = layer < 2 ? DType::Q5_K : DType::Q4_K;
    if (n_layers_ == 80 && (t == DType::Q3_K || t == DType::Q4_K)) t = DType::Q5_K;
    return t;
  }
  if (contains(name, "ffn_down")) {
    if ((mix == QuantMix::Q4_K_M || mix == QuantMix::Q5_K_M) && use_more_bits(layer, n_layers_)) return DType::Q6_K;
    if (mix == QuantMix::Q3_K_M) return layer < n_layers_ / 16 ? DType::Q5_K : DType::Q4_K;
    return base;
  }
  if (contains(name, "attn_output.weight") && mix == QuantMix::Q3_K_M) return DType::Q4_K;
  return base;
}

DType QuantPlanner::type_for(const TensorShapeInfo& t) const {
  const bool matrix = t.n_dims >= 2 && t.name.size() >= 6 && t.name.compare(t.name.size() - 6, 6, "weight") == 0 &&
                      !contains(t.name, "_norm.weight");
  if (!matrix) return DType::F32;
  if (contains(t.name, "ffn_gate_inp.weight")) return DType::F32;  // an MoE router: llama.cpp never quantizes it
  DType type = mix_type(t.name);
  const bool is_output = t.name == "output.weight" || (!has_output_ && t.name == "token_embd.weight");
  // llama.cpp: an output whose rows are not whole super-blocks of the mix is Q8_0.
  if (is_output && target_.mix != QuantMix::OneType && t.cols % dtype_info(target_.base).block_elems != 0)
    type = DType::Q8_0;
  for (int i = 0; i < 3 && t.cols % dtype_info(type).block_elems != 0; ++i) type = fallback(type);
  return type;
}

}  // namespace ferry
