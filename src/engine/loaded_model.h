// What Engine and ServingEngine share: the model file opened, the backend made, the weights loaded, the
// LlamaModel with its paged KV cache sized, the tokenizer and the chat template, and the ModelInfo.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/engine.h"
#include "model/llama_model.h"
#include "model/model_file.h"
#include "ops/backend.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry {

struct TpRuntime;

// How big the KV cache and the step buffers are.
struct KvSizing {
  // Cache capacity in tokens over all sequences; 0: one context (a single sequence). Rounded up to blocks.
  int64_t kv_tokens = 0;
  int32_t max_step_tokens = 256;  // most tokens one forward step runs (activation buffers)
};

struct LoadedModel {
  ModelFile file;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::shared_ptr<TpRuntime> tp;  // tensor parallelism (engine/tp_setup.h): destroyed before the model
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
  ModelInfo info;
  int32_t context = 0;  // tokens per sequence

  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const {
    return tokenizer->encode(text, add_special, parse_special);
  }
  std::string apply_chat_template(const std::vector<ChatTurn>& turns, bool add_generation_prompt) const;
};

// The per-sequence context an EngineOptions asks for: o.context, or min(model maximum, 4096) when 0.
int32_t resolve_context(const EngineOptions& o, const ModelConfig& c);

// Bytes of K and V for one token over all layers: 2 * n_layers * n_kv_heads * head_dim * 4 (f32 cache).
int64_t kv_bytes_per_token(const ModelConfig& c);

// Host memory in bytes (physical RAM).
double host_memory_bytes();
// Free accelerator memory in bytes for o.device ("cuda"; 0 when unknown or on the CPU).
double device_free_bytes(const EngineOptions& o);

// Validates o (ferry::Error naming the bad option), opens the model and builds everything. `sizing(config,
// context)` returns the KV sizing once the config is known (called after the backend and the weights exist,
// so free device memory is what the cache may take). On the CPU a cache over 80% of RAM is refused.
using KvSizingFn = std::function<KvSizing(const ModelConfig& c, int32_t context)>;
std::unique_ptr<LoadedModel> load_model(const EngineOptions& o, const KvSizingFn& sizing);

}  // namespace ferry
