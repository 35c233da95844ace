#include "engine/loaded_model.h"

#include <algorithm>

#include <unistd.h>

#include "backends/cpu/cpu_backend.h"
#ifdef FERRY_HAS_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/cuda_backend.h"
#endif
#include "core/check.h"
#include "core/env.h"

namespace ferry {

namespace {

std::unique_ptr<Backend> make_backend(const EngineOptions& o, const Env& env) {
#ifdef FERRY_HAS_CUDA
  if (o.device == "cuda") {
    FERRY_CHECK(o.kernels == KernelSet::Fast, "--kernels reference is the CPU oracle; use it with --device cpu");
    return std::make_unique<CudaBackend>(CudaBackendOptions{});  // throws "no CUDA device: ..." without one
  }
  FERRY_CHECK(o.device == "cpu", "device '{}' is not available in this build (ferry runs on: cpu, cuda)", o.device);
#else
  FERRY_CHECK(o.device == "cpu", "device '{}' is not available in this build (ferry runs on: cpu)", o.device);
#endif
  CpuBackendOptions cpu;
  cpu.kernels = o.kernels == KernelSet::Reference ? CpuKernels::Reference : CpuKernels::Fast;
  cpu.n_threads = o.n_threads;
  cpu.simd = resolve_simd_level(env.simd);
  return std::make_unique<CpuBackend>(cpu);
}

void fill_info(LoadedModel& m, const EngineOptions& o) {
  const ModelConfig& c = m.file.config;
  ModelInfo& info = m.info;
  info.path = o.model_path;
  info.format = m.file.format == ModelFormat::Gguf ? "gguf" : "safetensors";
  info.arch = arch_name(c.arch);
  info.name = c.name;
  info.backend = m.backend->name();
  info.n_layers = c.n_layers;
  info.dim = c.dim;
  info.n_heads = c.n_heads;
  info.n_kv_heads = c.n_kv_heads;
  info.head_dim = c.head_dim;
  info.hidden_dim = c.hidden_dim;
  info.vocab_size = c.vocab_size;
  info.context = m.context;
  info.model_context = c.max_context;
  info.n_params = c.n_params();
  info.kv_bytes = m.model->kv_bytes();
  info.facts = m.file.facts;
  for (const auto& [name, t] : m.file.tensors) {
    info.weight_bytes += t.nbytes();
    info.tensors.push_back({name, std::string(dtype_name(t.dtype)), t.shape_str(), t.nbytes()});
  }
}

}  // namespace

int32_t resolve_context(const EngineOptions& o, const ModelConfig& c) {
  const int32_t context = o.context > 0 ? o.context : std::min(c.max_context, 4096);
  FERRY_CHECK(context <= c.max_context, "context of {} tokens exceeds the model's maximum of {}", context,
              c.max_context);
  return context;
}

int64_t kv_bytes_per_token(const ModelConfig& c) { return 2LL * c.n_layers * c.n_kv_heads * c.head_dim * 4; }

double host_memory_bytes() { return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)); }

double device_free_bytes(const EngineOptions& o) {
#ifdef FERRY_HAS_CUDA
  if (o.device == "cuda") {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) return double(free_bytes);
  }
#else
  (void)o;
#endif
  return 0.0;
}

std::string LoadedModel::apply_chat_template(const std::vector<ChatTurn>& turns, bool add_generation_prompt) const {
  FERRY_CHECK(chat_template != nullptr, "{}: the model has no chat template", info.path);
  std::vector<ChatMessage> messages;
  for (const ChatTurn& t : turns) messages.push_back({t.role, t.content});
  return chat_template->apply(messages, add_generation_prompt);
}

std::unique_ptr<LoadedModel> load_model(const EngineOptions& o, const KvSizingFn& sizing) {
  FERRY_CHECK(o.n_threads >= 0 && o.n_threads <= 1024, "--threads {} out of range (0..1024)", o.n_threads);
  FERRY_CHECK(o.context >= 0 && o.context <= (1 << 24), "context {} out of range", o.context);
  FERRY_CHECK(o.max_step_tokens > 0 && o.max_step_tokens <= 65536, "step size {} out of range", o.max_step_tokens);
  FERRY_CHECK(o.block_size > 0 && o.block_size <= 1024, "block size {} out of range", o.block_size);
  const Env env = Env::read();
  auto loaded = std::make_unique<LoadedModel>();
  LoadedModel& m = *loaded;
  m.file = open_model(o.model_path);
  const ModelConfig& c = m.file.config;
  m.backend = make_backend(o, env);
  ModelWeights weights = load_weights(c, *m.file.weights, m.file.gguf_names, *m.backend);

  m.context = resolve_context(o, c);
  const KvSizing s = sizing(c, m.context);
  FERRY_CHECK(s.max_step_tokens > 0 && s.max_step_tokens <= 65536, "step size {} out of range", s.max_step_tokens);
  const int64_t kv_tokens = s.kv_tokens > 0 ? s.kv_tokens : m.context;
  FERRY_CHECK(kv_tokens <= int64_t(1) << 31, "KV cache of {} tokens is too large", kv_tokens);
  KvCacheShape kv;
  kv.block_size = o.block_size;
  kv.n_blocks = int32_t((kv_tokens + o.block_size - 1) / o.block_size);
  const double kv_bytes = double(kv_bytes_per_token(c)) * double(kv.n_blocks) * kv.block_size;
  // On the CPU the cache lives in host memory: refuse what cannot fit before allocating. (A GPU backend's
  // allocation fails with a clear out-of-memory error naming what was asked and what is free.)
  const double host_bytes = host_memory_bytes();
  FERRY_CHECK(o.device != "cpu" || kv_bytes < 0.8 * host_bytes,
              "KV cache of {} tokens needs {:.1f} GiB, more than this machine's {:.1f} GiB allows; use a smaller --ctx",
              int64_t(kv.n_blocks) * kv.block_size, kv_bytes / (1 << 30), host_bytes / (1 << 30));
  m.model = std::make_unique<LlamaModel>(c, std::move(weights), *m.backend, kv, s.max_step_tokens);
  m.tokenizer = std::make_unique<Tokenizer>(m.file.vocab);
  FERRY_CHECK(m.tokenizer->vocab_size() <= c.vocab_size, "{}: tokenizer has {} tokens but the model only {}",
              o.model_path, m.tokenizer->vocab_size(), c.vocab_size);
  if (m.file.vocab.chat_template) {
    const Vocab& v = m.file.vocab;
    const auto tok_text = [&](int32_t id) {
      return id >= 0 && id < int32_t(v.tokens.size()) ? m.tokenizer->token_to_piece(id) : std::string();
    };
    m.chat_template = std::make_unique<ChatTemplate>(*v.chat_template, tok_text(v.bos_id), tok_text(v.eos_id));
  }
  fill_info(m, o);
  return loaded;
}

}  // namespace ferry
