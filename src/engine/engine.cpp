// The public Engine: opens a model, builds the backend, the model and its KV cache, and runs one sequence
// at a time through a Session (continuous batching of many requests is the serving issue's engine loop).
#include "ferry/engine.h"

#include <algorithm>
#include <chrono>

#include <unistd.h>

#include "backends/cpu/cpu_backend.h"
#ifdef FERRY_HAS_CUDA
#include "backends/cuda/cuda_backend.h"
#endif
#include "core/check.h"
#include "core/env.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "formats/gguf.h"
#include "kv/block_pool.h"
#include "model/llama_model.h"
#include "model/model_file.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry {

struct Engine::Impl {
  ModelFile file;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<Session> session;
  ModelInfo info;
};

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

}  // namespace

Engine::Engine(const EngineOptions& o) : impl_(std::make_unique<Impl>()) {
  FERRY_CHECK(o.n_threads >= 0 && o.n_threads <= 1024, "--threads {} out of range (0..1024)", o.n_threads);
  FERRY_CHECK(o.context >= 0 && o.context <= (1 << 24), "context {} out of range", o.context);
  FERRY_CHECK(o.max_step_tokens > 0 && o.max_step_tokens <= 65536, "step size {} out of range", o.max_step_tokens);
  FERRY_CHECK(o.block_size > 0 && o.block_size <= 1024, "block size {} out of range", o.block_size);
  const Env env = Env::read();
  Impl& m = *impl_;
  m.file = open_model(o.model_path);
  const ModelConfig& c = m.file.config;
  m.backend = make_backend(o, env);
  ModelWeights weights = load_weights(c, *m.file.weights, m.file.gguf_names, *m.backend);

  const int context = o.context > 0 ? o.context : std::min(c.max_context, 4096);
  FERRY_CHECK(context <= c.max_context, "context of {} tokens exceeds the model's maximum of {}", context, c.max_context);
  KvCacheShape kv;
  kv.block_size = o.block_size;
  kv.n_blocks = (context + o.block_size - 1) / o.block_size;
  const double kv_bytes = 2.0 * c.n_layers * double(kv.n_blocks) * kv.block_size * c.n_kv_heads * c.head_dim * 4;
  // On the CPU the cache lives in host memory: refuse what cannot fit before allocating. (A GPU backend's
  // allocation fails with a clear out-of-memory error naming what was asked and what is free.)
  const double host_bytes = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  FERRY_CHECK(o.device != "cpu" || kv_bytes < 0.8 * host_bytes, "KV cache for a context of {} tokens needs {:.1f} GiB, more than this machine's {:.1f} GiB allows; use a smaller --ctx",
              context, kv_bytes / (1 << 30), host_bytes / (1 << 30));
  m.model = std::make_unique<LlamaModel>(c, std::move(weights), *m.backend, kv, std::min(o.max_step_tokens, context));
  m.pool = std::make_unique<BlockPool>(kv.n_blocks);
  m.session = std::make_unique<Session>(*m.model, *m.pool, context);
  m.tokenizer = std::make_unique<Tokenizer>(m.file.vocab);
  FERRY_CHECK(m.tokenizer->vocab_size() <= c.vocab_size, "{}: tokenizer has {} tokens but the model only {}", o.model_path,
              m.tokenizer->vocab_size(), c.vocab_size);
  if (m.file.vocab.chat_template) {
    const Vocab& v = m.file.vocab;
    const auto tok_text = [&](int32_t id) { return id >= 0 && id < int32_t(v.tokens.size()) ? m.tokenizer->token_to_piece(id) : std::string(); };
    m.chat_template = std::make_unique<ChatTemplate>(*v.chat_template, tok_text(v.bos_id), tok_text(v.eos_id));
  }

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
  info.context = context;
  info.model_context = c.max_context;
  info.n_params = c.n_params();
  info.kv_bytes = m.model->kv_bytes();
  info.facts = m.file.facts;
  for (const auto& [name, t] : m.file.tensors) {
    info.weight_bytes += t.nbytes();
    info.tensors.push_back({name, std::string(dtype_name(t.dtype)), t.shape_str(), t.nbytes()});
  }
}

Engine::~Engine() = default;

const ModelInfo& Engine::info() const { return impl_->info; }

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->tokenizer->encode(text, add_special, parse_special);
}

std::string Engine::detokenize(std::span<const int32_t> tokens) const { return impl_->tokenizer->decode(tokens); }

bool Engine::has_chat_template() const { return impl_->chat_template != nullptr; }

std::string Engine::apply_chat_template(const std::vector<ChatTurn>& turns, bool add_generation_prompt) const {
  FERRY_CHECK(impl_->chat_template != nullptr, "{}: the model has no chat template", impl_->info.path);
  std::vector<ChatMessage> messages;
  for (const ChatTurn& t : turns) messages.push_back({t.role, t.content});
  return impl_->chat_template->apply(messages, add_generation_prompt);
}

GenerateResult Engine::generate(std::span<const int32_t> prompt, const SamplingParams& params, int max_tokens,
                                const TokenCallback& on_token, bool stop_at_eog) {
  using Clock = std::chrono::steady_clock;
  Impl& m = *impl_;
  FERRY_CHECK(max_tokens >= 0, "max tokens {} must not be negative", max_tokens);
  FERRY_CHECK(!prompt.empty(), "empty prompt: nothing to generate from");
  FERRY_CHECK(int64_t(prompt.size()) <= m.session->max_context(),
              "prompt of {} tokens is longer than the context of {} tokens", prompt.size(), m.session->max_context());
  Sampler sampler(params, m.model->config().vocab_size);
  IncrementalDetokenizer detok(*m.tokenizer);
  GenerateResult r;
  r.n_prompt = int(prompt.size());

  const auto t0 = Clock::now();
  const int32_t before = m.session->n_tokens();
  std::span<const float> logits = m.session->set_history(prompt);
  r.n_prompt_computed = int(prompt.size()) - std::min<int32_t>(before, int32_t(prompt.size()) - 1);
  const auto t1 = Clock::now();
  r.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();

  for (int i = 0; i < max_tokens; ++i) {
    const int32_t tok = sampler.sample(logits, m.session->history());
    if (stop_at_eog && m.tokenizer->is_eog(tok)) {
      r.finish = FinishReason::Stop;
      break;
    }
    r.tokens.push_back(tok);
    const std::string piece = detok.push(tok);
    r.text += piece;
    if (on_token && !on_token(piece, tok)) {
      r.finish = FinishReason::Stop;
      break;
    }
    // The last token is not run: nothing would sample from its logits. The next generate() call computes
    // it as part of its prompt (set_history keeps the common prefix).
    if (i + 1 == max_tokens || m.session->n_tokens() >= m.session->max_context()) break;
    const int32_t one[1] = {tok};
    logits = m.session->append(one);
  }
  const std::string rest = detok.flush();
  if (!rest.empty()) {
    r.text += rest;
    if (on_token) on_token(rest, -1);
  }
  r.gen_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return r;
}

std::vector<float> Engine::score(std::span<const int32_t> tokens) {
  impl_->session->reset();
  std::vector<float> logits;
  impl_->session->append_all_logits(tokens, logits);
  return logits;
}

void Engine::reset() { impl_->session->reset(); }

}  // namespace ferry
