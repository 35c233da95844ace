// The Llama-family forward pass (Llama 2/3, SmolLM2, Mistral, Qwen2, Qwen3), written once over the
// Backend op set and the paged KV cache. It runs one Batch (any mix of prefill and decode rows of any
// number of sequences) and returns the logits of the requested rows.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/batch.h"
#include "model/config.h"
#include "model/weights.h"
#include "ops/backend.h"

namespace ferry {

struct KvCacheShape {
  int32_t n_blocks = 0;
  int32_t block_size = 16;
};

// Called with every named intermediate when set (debugging against transformers layer by layer).
using TensorObserver = std::function<void(const std::string& name, int layer, const Tensor& t)>;

class LlamaModel {
 public:
  // max_step_tokens: the most tokens one Batch may hold (sizes the activation buffers).
  LlamaModel(ModelConfig config, ModelWeights weights, Backend& backend, KvCacheShape kv, int32_t max_step_tokens);

  const ModelConfig& config() const { return config_; }
  const KvCacheShape& kv_shape() const { return kv_; }
  int32_t max_step_tokens() const { return max_step_tokens_; }
  size_t kv_bytes() const;

  // logits: resized to (batch.logit_rows.size(), vocab_size), row-major.
  void forward(const Batch& batch, std::vector<float>& logits);

  void set_observer(TensorObserver observer) { observer_ = std::move(observer); }

 private:
  void observe(const char* name, int layer, const Tensor& t) const {
    if (observer_) observer_(name, layer, t);
  }
  Tensor upload_i32(const std::vector<int32_t>& v, DeviceBuffer& buf);
  Tensor upload_i64(const std::vector<int64_t>& v, DeviceBuffer& buf);

  ModelConfig config_;
  ModelWeights weights_;
  Backend& backend_;
  KvCacheShape kv_;
  int32_t max_step_tokens_;
  Tensor inv_freq_;  // (rope_dims/2) f32
  // Paged KV cache, per layer: (n_blocks, block_size, n_kv_heads, head_dim) f32.
  std::vector<DeviceBuffer> k_cache_, v_cache_;
  // Activations, sized for max_step_tokens rows.
  DeviceBuffer x_, xb_, q_, k_, v_, attn_, out_, gate_, up_, logits_hidden_, logits_, inv_freq_buf_;
  DeviceBuffer ids_buf_, pos_buf_, slots_buf_, qstart_buf_, qlen_buf_, kvlen_buf_, tables_buf_, rows_buf_;
  size_t logits_capacity_rows_ = 0;
  TensorObserver observer_;
};

}  // namespace ferry
