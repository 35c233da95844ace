// From a parsed OpenAI request to an engine request: the chat template or the prompt string is tokenized, the
// context limit checked, defaults filled. Throws ApiError (400/404) naming the parameter at fault.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"  // ferry::Error, which serving.h uses
#include "ferry/serving.h"
#include "server/chat_output.h"
#include "server/openai_request.h"
#include "server/tool_format.h"

namespace ferry::server {

struct ModelFacts {
  std::vector<std::string> names;  // names a request's "model" may use (the first is reported)
  int context = 0;                 // tokens per sequence
  int vocab_size = 0;
  bool parse_special_in_content = false;  // message content may hold special tokens (else: plain text)
  ToolTemplateTraits tool_template{};     // the chat template's tool-call markup (tool_format.h)
  bool template_thinks = false;           // its output may carry a <think> block (reasoning_parser.h)
  bool split_reasoning = true;            // the server's default for reasoning_format (--reasoning-format)
};

// The chat template's traits (its tool-call markup, the form it wants past calls' arguments in, whether it
// thinks) into facts, read once at start by the server and by `ferry batch`.
void learn_chat_template(const ServingEngine& engine, ModelFacts& facts);

// What a request becomes: the engine request of each choice (choice i: seed + i) and how its output is read.
struct GenerationPlan {
  GenerationRequest request;  // choice 0's
  ChatOutputOptions output;   // chat: reasoning split and tool-call parsing (id_seed: choice 0's)
};

// 404 model_not_found when `model` is not empty and not one of facts.names.
void check_model(const std::string& model, const ModelFacts& facts);

// Fills a GenerationPlan. `seed` is used when the request gave none. A forced tool call (tool_choice required or
// a function) becomes the request's format (forced_tool_call_format), so it cannot be combined with a
// response_format (400).
GenerationPlan build_generation_request(const ParsedRequest& parsed, const ServingEngine& engine,
                                        const ModelFacts& facts, uint64_t seed);

// The checks on a tokenized prompt (split out for unit tests): 1 .. context-1 tokens, ids < vocab_size.
void check_prompt(const std::vector<int32_t>& prompt, Endpoint endpoint, const ModelFacts& facts);

}  // namespace ferry::server
