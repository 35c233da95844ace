#include "server/generation.h"

#include <algorithm>

#include "server/api_error.h"
#include "server/chat_prompt.h"

namespace ferry::server {

void check_model(const std::string& model, const ModelFacts& facts) {
  if (model.empty()) return;
  if (std::find(facts.names.begin(), facts.names.end(), model) != facts.names.end()) return;
  throw ApiError(404, "The model '" + model + "' does not exist (this server serves '" +
                          (facts.names.empty() ? std::string() : facts.names.front()) + "')",
                 "model", "model_not_found");
}

void check_prompt(const std::vector<int32_t>& prompt, Endpoint endpoint, const ModelFacts& facts) {
  const char* param = endpoint == Endpoint::Chat ? "messages" : "prompt";
  if (prompt.empty()) throw ApiError(400, std::string("'") + param + "': the prompt is empty", param);
  for (const int32_t id : prompt)
    if (id < 0 || id >= facts.vocab_size)
      throw ApiError(400, "'prompt': token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                              std::to_string(facts.vocab_size - 1) + ")", "prompt");
  if (int64_t(prompt.size()) >= facts.context)
    throw ApiError(400, "This model's maximum context length is " + std::to_string(facts.context) +
                            " tokens. However, your prompt has " + std::to_string(prompt.size()) +
                            " tokens (at most " + std::to_string(facts.context - 1) + " leave room for one to generate).",
                   param, "context_length_exceeded");
}

GenerationRequest build_generation_request(const ParsedRequest& parsed, const ServingEngine& engine,
                                           const ModelFacts& facts, uint64_t seed) {
  GenerationRequest g;
  try {
    if (parsed.endpoint == Endpoint::Chat) {
      // The template's markers are special tokens; the messages' content is text (chat_prompt.h).
      g.prompt = tokenize_chat(engine, parsed.messages, facts.parse_special_in_content);
    } else if (parsed.prompt_text) {
      g.prompt = engine.tokenize(*parsed.prompt_text, true, false);
    } else {
      g.prompt = parsed.prompt_tokens;
    }
  } catch (const Error& e) {  // e.g. invalid UTF-8, a template that rejects the conversation
    const char* param = parsed.endpoint == Endpoint::Chat ? "messages" : "prompt";
    throw ApiError(400, std::string("'") + param + "': " + e.what(), param);
  }
  check_prompt(g.prompt, parsed.endpoint, facts);
  const int32_t room = int32_t(facts.context - int64_t(g.prompt.size()));
  // Absent max_tokens: chat runs to the end of the context (OpenAI), completions make 16 (OpenAI's default);
  // a larger max_tokens than fits stops at the context's end with finish_reason "length".
  g.max_tokens = parsed.max_tokens.value_or(parsed.endpoint == Endpoint::Chat ? room : 16);
  g.sampling = parsed.sampling;
  if (!parsed.seed_given) g.sampling.seed = seed;
  g.stop = parsed.stop;
  g.ignore_eos = parsed.ignore_eos;
  g.logprobs = parsed.logprobs;
  g.format = parsed.format;
  g.logit_bias = parsed.logit_bias;
  return g;
}

}  // namespace ferry::server
