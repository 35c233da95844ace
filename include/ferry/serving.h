// ferry's serving API (public): many requests at once through one engine loop (continuous batching over the
// paged KV cache, chunked prefill, prefix caching, preemption). The HTTP server and `ferry serve` use only
// this header and engine.h.
//
//   ferry::ServingEngine engine({.model_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf"}, {});
//   auto h = engine.submit({.prompt = engine.tokenize("Hello", true, true), .max_tokens = 16});
//   ferry::RequestUpdate u;
//   while (h->wait(u, std::chrono::seconds(1)) || !h->finished()) { std::cout << u.text; if (u.finished) break; }
//
// Threading: the engine loop (one thread started by the constructor) owns the backend, the model, the KV cache
// and every sequence. submit(), RequestHandle and stats() are thread-safe and only exchange messages with it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/check.h"  // ferry::Error (a std::runtime_error), the base of QueueFull
#include "ferry/engine.h"
#include "ferry/sampling.h"

namespace ferry {

struct ServingOptions {
  int max_running = 64;       // sequences in one step at most (decode batch size)
  int max_step_tokens = 512;  // token budget of one step: decode tokens + prefill chunks (chunked prefill)
  int max_waiting = 256;      // requests queued (not yet running) beyond which submit() throws QueueFull
  int64_t kv_tokens = 0;      // KV cache capacity in tokens over all sequences; 0: automatic (CPU: enough for
                              // max_running sequences of full context within 50% of RAM; CUDA: 90% of free memory)
  bool prefix_caching = true; // reuse cached full blocks of equal prompt prefixes
  int postprocess_threads = 0;   // threads sampling the step's rows in parallel; 0: automatic (1 on the CPU, whose
                                 // cores the backend uses; min(8, hardware threads / 2) on CUDA)
  bool batch_invariant = false;  // a request's output does not depend on what else is in the batch (CUDA;
                                 // the CPU kernels are batch-invariant always)
  bool device_sampling = true;   // sample on the device where the backend can (CUDA at tensor-parallel world 1):
                                 // only token ids cross to the host; rows with logprobs or penalties still copy
                                 // their logits and sample on the host. Same tokens as the host sampler.
                                 // Off: every row on the host (also EngineOptions::device_sampling).
  bool async_scheduling = true;  // with device sampling: step k+1 is scheduled and launched before step k's tokens
                                 // reach the host (its inputs name them; the device fills them in), so the host's
                                 // schedule/postprocess overlaps the device's work. Same tokens as off. A step with
                                 // logprobs or penalties rows is finished before the next launch. Also
                                 // `ferry serve --no-async-scheduling` turns it off.
  bool graph_warmup = true;      // backends that replay step graphs (CUDA, tp 1): record the graphs of the steps a
                                 // loaded server takes before serving (ModelRunner::warm_up_graphs; ~2 s at start
                                 // for Llama-3-8B) instead of capturing each on the first step that has its shape
  bool check_invariants = false; // tests and debugging: after every step verify the KV bookkeeping (every
                                 // block's ref count equals the sequences holding it, pool and prefix-map
                                 // consistency); O(n_blocks) per step. A violation fails the requests in flight.
};

// Structured output: the generated text is constrained to a sentence of the format (each step samples only
// tokens that keep it a viable prefix), and generation ends with finish Stop when the format is complete and
// nothing can follow it. submit() compiles it (cached by text) and throws ferry::Error naming a bad or
// unsupported schema feature.
enum class OutputFormatKind { Text, JsonObject, JsonSchema, Regex, Gbnf };
struct OutputFormat {
  OutputFormatKind kind = OutputFormatKind::Text;
  std::string text;  // JsonSchema: the schema (JSON text); Regex: the pattern; Gbnf: the grammar; else unused
  // JsonSchema only: each value is written between the literal texts `prefix` and `suffix`, 1..max_repeats
  // values in a row separated by `separator` (max_repeats 0: any number): a chat template's tool-call markup,
  // e.g. prefix "<tool_call>\n", suffix "\n</tool_call>", separator "\n".
  std::string prefix{}, suffix{}, separator{};
  int32_t max_repeats = 1;
  // JsonSchema only, for markup that names the function outside its JSON (<function=f>{...}</function>): when
  // not empty, each value is one of these, written between its own literal texts (text, prefix and suffix are
  // then unused), so a name is tied to its own schema. `open` / `close`: literal texts before the first value
  // and after the last (DeepSeek's <｜tool▁calls▁begin｜> ... <｜tool▁calls▁end｜>), with either form.
  struct TaggedSchema {
    std::string prefix, schema, suffix;
  };
  std::vector<TaggedSchema> alternatives{};
  std::string open{}, close{};
  // Not Text only: the format applies from the byte after the first occurrence of this text in the output
  // (a reasoning model's end marker, "</think>": the reasoning before it is free), blanks after it skipped.
  // Until it comes no end-of-generation token is drawn, so a model that never closes its reasoning runs to
  // max_tokens (finish Length, no constrained text). "" : the format applies from the first token.
  std::string starts_after{};
};

// One generation request. Every field is validated by submit(), which throws ferry::Error naming the bad one.
struct GenerationRequest {
  std::vector<int32_t> prompt;        // token ids, 1 .. context-1 of them
  SamplingParams sampling;
  int32_t max_tokens = 16;            // >= 0; generation also stops when the context is full
  std::vector<std::string> stop;      // stop strings: the output ends before the first occurrence (excluded)
  bool ignore_eos = false;            // keep going past end-of-generation tokens
  int32_t logprobs = -1;              // -1: none; 0..20: the chosen token's logprob and this many top alternatives
  uint64_t cache_salt = 0;            // prefix-cache partition: cached blocks are shared only between equal salts
  OutputFormat format;                // structured output (rows with one sample on the host)
  // OpenAI's logit_bias: (token id, bias in -100..100) added to the token's logit before sampling (rows with
  // one sample on the host); at most kMaxLogitBias entries.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Speculative decoding (include/ferry/engine.h): unset: the engine's default (EngineOptions::spec); Draft needs
  // the engine to have loaded a draft model. Requests with logprobs, logit_bias or a format decode plainly.
  std::optional<SpecMode> spec;
  int32_t spec_k = 0;  // most proposals per step, 1..kMaxSpecTokens; 0: the engine's (EngineOptions::spec.k)
};
inline constexpr size_t kMaxLogitBias = 1024;

struct TokenLogprobOut {
  int32_t id = 0;
  std::string text;     // the token's own piece (may be part of a UTF-8 character)
  float logprob = 0.0f;
};

struct GeneratedToken {
  int32_t id = 0;
  TokenLogprobOut chosen;                 // filled when logprobs >= 0
  std::vector<TokenLogprobOut> top;       // the `logprobs` most likely alternatives, most likely first
};

struct RequestUsage {
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;      // prompt tokens whose K/V came from the prefix cache
  int32_t completion_tokens = 0;
};

// One event on a request's channel. Updates are coalesced: one update may carry several tokens.
struct RequestUpdate {
  std::string text;                      // new text since the previous update (whole UTF-8 characters; text that
                                         // could be the start of a stop string is held back until decided)
  std::vector<GeneratedToken> tokens;    // tokens since the previous update
  bool finished = false;                 // last update of this request
  FinishReason finish = FinishReason::Length;  // meaningful when finished (Stop: end-of-generation token or stop
                                               // string; Length: max_tokens or context full)
  std::string error;                     // finish == Error: why
  RequestUsage usage;                    // running totals
};

class RequestHandle {
 public:
  virtual ~RequestHandle() = default;
  virtual uint64_t id() const = 0;
  // Waits up to `timeout` for news; returns true and fills `out` with everything since the previous call
  // (coalesced), false on timeout. After the finished update, returns false at once.
  virtual bool wait(RequestUpdate& out, std::chrono::milliseconds timeout) = 0;
  virtual bool finished() const = 0;
  // Thread-safe; idempotent. The engine drops the sequence at its next step and gives its blocks back; a final
  // update with finish == Cancelled follows (unless it had already finished).
  virtual void cancel() = 0;
};

// Thrown by submit() when max_waiting requests are already queued (HTTP 429/503 with Retry-After).
class QueueFull : public Error {
 public:
  explicit QueueFull(const std::string& what) : Error(what) {}
};

// A snapshot for /metrics.
struct ServingStats {
  int32_t running = 0, waiting = 0;
  int32_t kv_blocks_total = 0, kv_blocks_used = 0;
  int64_t requests_finished = 0, requests_cancelled = 0, requests_failed = 0, requests_rejected = 0;
  int64_t preemptions = 0;
  int64_t prompt_tokens = 0, prompt_tokens_cached = 0;  // over all admitted requests
  int64_t generated_tokens = 0;
  int64_t steps = 0;
  double busy_seconds = 0;                               // time spent running steps
  int64_t logits_host_bytes = 0;      // f32 logits copied from the device to the host (all steps)
  int64_t device_sampled_tokens = 0;  // tokens drawn on the device (ServingOptions.device_sampling)
  int64_t graph_replays = 0;          // steps run as one step-graph launch (decode steps on CUDA)
  int64_t overlapped_steps = 0;       // steps launched while the previous one was not yet postprocessed
                                      // (ServingOptions::async_scheduling)
  int64_t spec_proposed = 0;          // speculative decoding: tokens proposed to verify steps
  int64_t spec_accepted = 0;          // of them, the ones the target kept
  int64_t spec_steps = 0;             // sequence steps that verified proposals
  int32_t graph_warmup_steps = 0;     // step graphs recorded at start (ServingOptions::graph_warmup)
  double graph_warmup_seconds = 0;    // and the time that took
  double prefix_hit_rate() const { return prompt_tokens ? double(prompt_tokens_cached) / double(prompt_tokens) : 0.0; }
};

class ServingEngine {
 public:
  // Loads the model (throws ferry::Error with a clear message) and starts the engine loop.
  ServingEngine(const EngineOptions& engine, const ServingOptions& serving);
  ~ServingEngine();  // shutdown(false)
  ServingEngine(const ServingEngine&) = delete;
  ServingEngine& operator=(const ServingEngine&) = delete;

  const ModelInfo& info() const;
  const ServingOptions& options() const;
  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const;
  std::string detokenize(std::span<const int32_t> tokens) const;
  bool has_chat_template() const;
  std::string apply_chat_template(const std::vector<ChatTurn>& turns, bool add_generation_prompt) const;
  // The template rendered over a whole context given as a JSON object's text: messages with tool_calls and
  // tool turns, tools, add_generation_prompt, extra variables (enable_thinking); transformers' defaults fill the
  // rest (chat_template.h). Throws ferry::Error for bad JSON or a template that raises.
  std::string render_chat_template(std::string_view context_json) const;
  // The chat template's Jinja text ("" without one): the server picks its tool-call and reasoning formats by it.
  std::string chat_template_source() const;

  // Queues a request. Throws ferry::Error for a bad request (naming the field: prompt too long for the context,
  // bad sampling parameter, ...), QueueFull when the waiting queue is full, ferry::Error after shutdown().
  std::shared_ptr<RequestHandle> submit(GenerationRequest request);

  ServingStats stats() const;

  // Stops accepting requests; finish_in_flight: lets running and waiting requests complete, else cancels them.
  // Returns when the engine loop has exited. Idempotent.
  void shutdown(bool finish_in_flight);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry
