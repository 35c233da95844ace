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
#include "engine/load_progress.h"
#include "engine/tp_setup.h"
#include "model/moe_names.h"
#include "parallel/random_weights.h"

namespace ferry {

namespace {

#ifdef FERRY_HAS_CUDA
// Whether prefill matmuls read a bf16 copy of quantized weights (FERRY_CUDA_PREFILL_BF16; see core/env.h).
// Automatic: when the copies take at most 40% of the device's free memory. Example: Llama-3-8B Q4_0 has 7.5e9
// weights in quantized matrices -> 15 GB of copies; an H200 with 140 GB free keeps them (limit 56 GB); a
// 70B Q4_0 (140 GB of copies) does not.
bool want_bf16_copies(const Env& env, const ModelFile& file, int device_index) {
  if (env.cuda_prefill_bf16) return *env.cuda_prefill_bf16;
  double copy_bytes = 0;
  for (const auto& [name, t] : file.tensors)
    if (t.n_dims == 2 && t.dtype != DType::BF16 && t.dtype != DType::F32) copy_bytes += 2.0 * double(t.numel());
  if (copy_bytes == 0) return false;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaSetDevice(device_index) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;  // the backend's constructor reports the device problem
  }
  return copy_bytes <= 0.4 * double(free_bytes);
}
#endif

std::unique_ptr<Backend> make_backend(const EngineOptions& o, const ModelFile& file, int device_index,
                                      int n_threads) {
  const Env& env = o.env;
#ifdef FERRY_HAS_CUDA
  if (o.device == "cuda") {
    FERRY_CHECK(o.kernels == KernelSet::Fast, "--kernels reference is the CPU oracle; use it with --device cpu");
    const CudaBackendOptions cuda{.device_index = device_index,
                                  .prefill_bf16_weights = want_bf16_copies(env, file, device_index),
                                  .batch_invariant = o.batch_invariant,
                                  .profile_ops = env.cuda_profile,
                                  .phase_stamps = env.cuda_stamps,
                                  .tune = env.cuda_tune};
    return std::make_unique<CudaBackend>(cuda);  // throws "no CUDA device: ..." without one
  }
  FERRY_CHECK(o.device == "cpu", "device '{}' is not available in this build (ferry runs on: cpu, cuda)", o.device);
#else
  FERRY_CHECK(o.device == "cpu", "device '{}' is not available in this build (ferry runs on: cpu)", o.device);
#endif
  CpuBackendOptions cpu;
  cpu.kernels = o.kernels == KernelSet::Reference ? CpuKernels::Reference : CpuKernels::Fast;
  cpu.n_threads = n_threads;
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
  info.document_start_token = m.file.vocab.bos_id >= 0 ? m.file.vocab.bos_id : m.file.vocab.eos_id;
  info.facts = m.file.facts;
  for (auto& fact : config_facts(c)) info.facts.push_back(std::move(fact));
  for (auto& fact : m.backend->facts()) info.facts.push_back(std::move(fact));
  info.n_experts = c.n_experts;
  info.n_experts_used = c.n_experts_used;
  info.expert_hidden_dim = c.expert_hidden_dim;
  info.n_active_params = c.n_active_params();
  double active = 0;
  for (const auto& [name, t] : m.file.tensors) {
    const bool expert = name.find("_exps.") != std::string::npos || parse_hf_expert_name(name).has_value();
    const bool embedding = !c.tied_embeddings && (name == "token_embd.weight" || name == "model.embed_tokens.weight");
    if (!embedding) active += expert ? double(t.nbytes()) * c.n_experts_used / c.n_experts : double(t.nbytes());
    info.weight_bytes += t.nbytes();
    info.tensors.push_back({name, std::string(dtype_name(t.dtype)), t.shape_str(), t.nbytes()});
  }
  info.active_bytes = size_t(active);
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

namespace {

// The KV cache shape and step size for a model config (a tensor-parallel rank's shard: its KV heads).
std::pair<KvCacheShape, int32_t> kv_shape_for(const EngineOptions& o, const ModelConfig& c, int32_t context,
                                              const KvSizingFn& sizing) {
  const KvSizing s = sizing(c, context);
  FERRY_CHECK(s.max_step_tokens > 0 && s.max_step_tokens <= 65536, "step size {} out of range", s.max_step_tokens);
  const int64_t kv_tokens = s.kv_tokens > 0 ? s.kv_tokens : context;
  FERRY_CHECK(kv_tokens <= int64_t(1) << 31, "KV cache of {} tokens is too large", kv_tokens);
  KvCacheShape kv;
  kv.block_size = o.block_size;
  kv.n_blocks = int32_t((kv_tokens + o.block_size - 1) / o.block_size);
  kv.max_seq_tokens = context;
  const double kv_bytes = double(kv_bytes_per_token(c)) * double(kv.n_blocks) * kv.block_size;
  // On the CPU the cache lives in host memory: refuse what cannot fit before allocating. (A GPU backend's
  // allocation fails with a clear out-of-memory error naming what was asked and what is free.)
  const double host_bytes = host_memory_bytes();
  FERRY_CHECK(o.device != "cpu" || kv_bytes < 0.8 * host_bytes,
              "KV cache of {} tokens needs {:.1f} GiB, more than this machine's {:.1f} GiB allows; use a smaller --ctx",
              int64_t(kv.n_blocks) * kv.block_size, kv_bytes / (1 << 30), host_bytes / (1 << 30));
  return {kv, s.max_step_tokens};
}

}  // namespace

std::unique_ptr<LoadedModel> load_model(const EngineOptions& o, const KvSizingFn& sizing) {
  FERRY_CHECK(o.n_threads >= 0 && o.n_threads <= 1024, "--threads {} out of range (0..1024)", o.n_threads);
  FERRY_CHECK(o.context >= 0 && o.context <= (1 << 24), "context {} out of range", o.context);
  FERRY_CHECK(o.max_step_tokens > 0 && o.max_step_tokens <= 65536, "step size {} out of range", o.max_step_tokens);
  FERRY_CHECK(o.block_size > 0 && o.block_size <= 1024, "block size {} out of range", o.block_size);
  auto loaded = std::make_unique<LoadedModel>();
  LoadedModel& m = *loaded;
  // "random:SHAPE[:TYPE[:SEED]]": a random-weight model generated in memory, each rank its shard (parallel/random_weights.h).
  const bool random = is_random_model_path(o.model_path);
  if (o.on_load_progress) o.on_load_progress({"mapping", 0, 0});
  RandomProgressFn on_generated;  // a random model reports its tensors as the ranks generate them
  if (o.on_load_progress && random)
    on_generated = [fn = o.on_load_progress](uint64_t done, uint64_t total) { fn({"generating", done, total}); };
  m.file = random ? open_random_model(o.model_path, on_generated) : open_model(o.model_path);
  uint64_t file_bytes = 0;
  for (const auto& [name, t] : m.file.tensors) file_bytes += t.nbytes();
  if (o.on_load_progress && !random) o.on_load_progress({"mapping", file_bytes, file_bytes});  // random: nothing mapped
  // The random source is generated per rank (load_sharded_weights looks for its type): not wrapped.
  ProgressWeightSource* progress = nullptr;
  if (o.on_load_progress && !random && file_bytes > 0) {
    auto wrapped = std::make_unique<ProgressWeightSource>(std::move(m.file.weights),
                                                          o.device == "cuda" ? "uploading" : "repacking", file_bytes,
                                                          o.on_load_progress);
    progress = wrapped.get();
    m.file.weights = std::move(wrapped);
  }
  const ModelConfig& c = m.file.config;
  m.context = resolve_context(o, c);
  // Tensor parallelism (o.tp > 1; engine/tp_setup.h): this rank's shard and its communicator. Sizing gets
  // the shard's config (its share of the KV heads). A follower process never returns from here.
  ParallelModel pm = build_parallel_model(
      o, m.file, [&](int device_index, int n_threads) { return make_backend(o, m.file, device_index, n_threads); },
      [&](const ModelConfig& local) { return kv_shape_for(o, local, m.context, sizing); });
  if (progress != nullptr) m.file.weights = progress->finish();
  if (on_generated) on_generated(file_bytes, file_bytes);  // a tensor no rank asked for (none today) ends the bar too
  m.backend = std::move(pm.backend);
  m.model = std::move(pm.model);
  m.tp = std::move(pm.tp);
  m.file.facts.insert(m.file.facts.end(), pm.facts.begin(), pm.facts.end());  // tensor-parallel measurements
  m.tokenizer = std::make_unique<Tokenizer>(m.file.vocab);
  FERRY_CHECK(m.tokenizer->vocab_size() <= c.vocab_size, "{}: tokenizer has {} tokens but the model only {}",
              o.model_path, m.tokenizer->vocab_size(), c.vocab_size);
  if (!o.chat_template.empty()) m.file.vocab.chat_template = o.chat_template;  // the caller's replaces the model's
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
