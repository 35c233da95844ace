#include "model/moe_names.h"

#include <cstdlib>

namespace ferry {
namespace {

const char* gguf_proj(ExpertProj p) {
  return p == ExpertProj::Gate ? "ffn_gate_exps" : p == ExpertProj::Up ? "ffn_up_exps" : "ffn_down_exps";
}
const char* hf_proj(ExpertProj p, bool mixtral) {
  if (mixtral) return p == ExpertProj::Gate ? "w1" : p == ExpertProj::Up ? "w3" : "w2";
  return p == ExpertProj::Gate ? "gate_proj" : p == ExpertProj::Up ? "up_proj" : "down_proj";
}
const char* hf_block(bool mixtral) { return mixtral ? "block_sparse_moe" : "mlp"; }

// Reads a decimal number at s[at..] followed by `sep`; advances `at` past the separator.
std::optional<int> number_then(const std::string& s, size_t& at, char sep) {
  if (at >= s.size() || s[at] < '0' || s[at] > '9') return std::nullopt;
  char* end = nullptr;
  const long v = std::strtol(s.c_str() + at, &end, 10);
  if (*end != sep || v < 0 || v > (1 << 24)) return std::nullopt;
  at = size_t(end - s.c_str()) + 1;
  return int(v);
}

}  // namespace

std::string ExpertNames::router() const {
  const std::string l = std::to_string(layer);
  return gguf ? "blk." + l + ".ffn_gate_inp.weight" : "model.layers." + l + "." + hf_block(mixtral) + ".gate.weight";
}

std::string ExpertNames::stacked(ExpertProj p) const {
  return "blk." + std::to_string(layer) + "." + gguf_proj(p) + ".weight";
}

std::string ExpertNames::per_expert(int expert, ExpertProj p) const {
  return "model.layers." + std::to_string(layer) + "." + hf_block(mixtral) + ".experts." + std::to_string(expert) + "." +
         hf_proj(p, mixtral) + ".weight";
}

std::optional<HfExpertTensor> parse_hf_expert_name(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  size_t at = prefix.size();
  const std::optional<int> layer = number_then(name, at, '.');
  if (!layer) return std::nullopt;
  for (bool mixtral : {false, true}) {
    const std::string block = std::string(hf_block(mixtral)) + ".experts.";
    if (name.compare(at, block.size(), block) != 0) continue;
    size_t e_at = at + block.size();
    const std::optional<int> expert = number_then(name, e_at, '.');
    if (!expert) return std::nullopt;
    for (ExpertProj p : {ExpertProj::Gate, ExpertProj::Up, ExpertProj::Down})
      if (name.compare(e_at, std::string::npos, std::string(hf_proj(p, mixtral)) + ".weight") == 0)
        return HfExpertTensor{*layer, *expert, p, mixtral};
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace ferry
