// ferry's public C++ API: what the CLI (and later the HTTP server) use. Everything else is internal.
//
//   ferry::Engine engine({.model_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf"});
//   auto prompt = engine.tokenize(engine.apply_chat_template({{"user", "Hi"}}, true), true, true);
//   engine.generate(prompt, {.temperature = 0}, 64, [](std::string_view text, int32_t) {
//     std::cout << text; return true; });
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/env.h"
#include "ferry/sampling.h"

namespace ferry {

enum class KernelSet { Fast, Reference };

// Where loading a model is: `stage` "mapping" (the file's tensors mapped and checked), then "repacking" (CPU:
// weights prepared in the kernels' layouts) or "uploading" (CUDA: weights copied to the GPU), or for a `random:`
// model "generating" (each tensor drawn, by the rank that needs it, then repacked or uploaded); `done` of `total`
// bytes of the file's tensors. Tensor-parallel ranks load at once: the callback may be called from several threads.
struct LoadProgress {
  std::string_view stage;
  uint64_t done = 0, total = 0;
};
using LoadProgressFn = std::function<void(const LoadProgress&)>;

// Speculative decoding: each step checks a sequence's last token plus up to k proposed tokens in one target
// forward (logits of every row) and keeps the proposals the target itself would have drawn there, then one token
// of its own; the KV of rejected proposals is dropped (engine/spec_verify.h). Same tokens as without it.
enum class SpecMode { Off, Ngram, Draft };
struct SpecOptions {
  SpecMode mode = SpecMode::Off;
  int k = 4;                // most tokens proposed per step, 1..16 (the count adapts below it: spec_verify.h)
  std::string draft_model;  // SpecMode::Draft: a model path sharing the target's tokenizer (same vocabulary)
};
inline constexpr int kMaxSpecTokens = 16;
// "off", "ngram", "draft" or "draft:MODEL" with k tokens (ferry::Error on anything else or k outside 1..16).
// "draft" alone takes draft_model as given (`--draft MODEL`).
SpecOptions parse_spec(std::string_view text, int k, std::string_view draft_model = {});
std::string_view spec_mode_name(SpecMode mode);

struct EngineOptions {
  std::string model_path;                // a .gguf file or a Hugging Face folder
  std::string device = "cpu";            // "cpu" or "cuda" (when built with the CUDA backend)
  KernelSet kernels = KernelSet::Fast;   // Reference: the plain-loop oracle kernels
  int n_threads = 0;                     // 0: all hardware threads
  int context = 0;                       // tokens per sequence; 0: min(model's context, 4096)
  int max_step_tokens = 256;             // prompt chunk size (tokens per forward step)
  int block_size = 16;                   // KV cache block size in tokens
  bool batch_invariant = false;          // CUDA: every row computed the same way whatever else is in the batch
                                         // (one GEMM kernel for all token counts, batch-independent attention
                                         // splits); the CPU kernels are batch-invariant always
  int tp = 1;                            // tensor-parallel ranks (cpu: threads; cuda: one process per GPU)
  int ep = 1;                            // expert-parallel ranks (mixtures of experts: experts placed on ranks, the
                                         // rest replicated; cpu only for now); at most one of tp, ep above 1
  int world() const { return tp * ep; }  // ranks in all
  std::optional<bool> prompt_graphs;     // serving engine: pad steps with prompt chunks to a few shapes (tokens to
                                         // a multiple of 64, sequences and logit rows to a power of two) and replay
                                         // them from step graphs like decode steps (CUDA; on the CPU only the
                                         // padding runs). Unset: on with CUDA at tp 1, else off.
  bool device_sampling = true;           // draw tokens on the device where the backend can (false: on the host)
  bool pipelined_decode = true;          // Engine::generate launches step t + 1 before reading step t's token
                                         // (device sampling only; the same tokens either way)
  std::string chat_template;             // Jinja text that replaces the model's own chat template ("" : the
                                         // model's; `ferry serve --chat-template FILE`, as vLLM and llama-server)
  SpecOptions spec;                      // speculative decoding in Engine::generate; ServingEngine: the draft
                                         // model it loads and the requests' default (GenerationRequest::spec)
  LoadProgressFn on_load_progress;       // empty: loading reports nothing (the CLI draws a progress bar)
  Env env;                               // the environment's settings (core/env.h): the CLI reads them once with
                                         // Env::read(); default-constructed, every variable at its default
};

struct ModelInfo {
  std::string path, format, arch, name;
  std::string backend;                   // "cpu-fast", "cpu-reference", ...
  int n_layers = 0, dim = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, hidden_dim = 0, vocab_size = 0;
  int context = 0;                       // the context this engine was opened with
  int model_context = 0;                 // the model's own maximum
  int64_t n_params = 0;
  int n_experts = 0, n_experts_used = 0;  // mixture of experts (0: dense), experts per token
  int expert_hidden_dim = 0;
  int64_t n_active_params = 0;           // parameters one token runs (= n_params for a dense model)
  size_t active_bytes = 0;               // weight bytes one token reads: all but the embedding table and the
                                         // experts it is not routed to (expert bytes * used / experts)
  size_t weight_bytes = 0;               // bytes of all tensors in the file(s)
  size_t kv_bytes = 0;                   // bytes of the KV cache allocated
  int32_t document_start_token = -1;     // BOS, else EOS (-1: neither): where a prompt-less completion starts
  std::vector<std::pair<std::string, std::string>> facts;                  // metadata for inspect
  struct TensorRow { std::string name, dtype, shape; size_t bytes; };
  std::vector<TensorRow> tensors;
};

struct ChatTurn {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

enum class FinishReason { Stop, Length, Cancelled, Error };

struct GenerateResult {
  std::vector<int32_t> tokens;   // generated tokens (the end-of-generation token excluded)
  std::string text;              // their text
  FinishReason finish = FinishReason::Length;
  int n_prompt = 0;              // prompt tokens
  int n_prompt_computed = 0;     // prompt tokens actually run (the rest came from the KV cache)
  double prompt_seconds = 0;     // time to the first token's logits
  double gen_seconds = 0;        // time spent generating after that
  int64_t target_steps = 0;      // target forward steps after the prompt (speculation: fewer than the tokens)
  int64_t spec_proposed = 0;     // tokens proposed to the verify steps (0 without speculation)
  int64_t spec_accepted = 0;     // of them, the ones the target kept
};

// on_token(text_piece, token): called as tokens are made (text pieces are whole UTF-8); return false to stop.
using TokenCallback = std::function<bool(std::string_view piece, int32_t token)>;

class Engine {
 public:
  explicit Engine(const EngineOptions& options);  // throws ferry::Error (std::runtime_error) with a clear message
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelInfo& info() const;

  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const;
  std::string detokenize(std::span<const int32_t> tokens) const;
  bool has_chat_template() const;
  std::string apply_chat_template(const std::vector<ChatTurn>& turns, bool add_generation_prompt) const;

  // Generates up to max_tokens after `prompt`. The KV cache of the previous call's sequence is reused for
  // the common prefix. Stops at an end-of-generation token or when the context is full.
  // stop_at_eog = false keeps going past end-of-generation tokens (benchmarks).
  GenerateResult generate(std::span<const int32_t> prompt, const SamplingParams& params, int max_tokens,
                          const TokenCallback& on_token, bool stop_at_eog = true);

  // Teacher-forced scoring from an empty cache: logits of every position, (tokens.size(), vocab_size).
  std::vector<float> score(std::span<const int32_t> tokens);

  void reset();  // drop the cached sequence

  // Benchmarks only (`ferry bench --spec oracle`; nothing in run, chat or serve calls it, and no --spec text or
  // request field names it): until called again with an empty sequence, generate() speculates with the oracle
  // proposer (engine/oracle_proposer.h), which proposes up to k tokens of `recorded` (a plain greedy run's prompt
  // and output) wherever the history is a prefix of it, instead of EngineOptions::spec. k in 1..kMaxSpecTokens.
  void replay_proposals(std::vector<int32_t> recorded, int k);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry
