// From a parsed OpenAI request to an engine request: the chat template or the prompt string is tokenized, the
// context limit checked, defaults filled. Throws ApiError (400/404) naming the parameter at fault.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"  // ferry::Error, which serving.h uses
#include "ferry/serving.h"
#include "server/openai_request.h"

namespace ferry::server {

struct ModelFacts {
  std::vector<std::string> names;  // names a request's "model" may use (the first is reported)
  int context = 0;                 // tokens per sequence
  int vocab_size = 0;
  bool parse_special_in_content = false;  // message content may hold special tokens (else: plain text)
};

// 404 model_not_found when `model` is not empty and not one of facts.names.
void check_model(const std::string& model, const ModelFacts& facts);

// Fills a GenerationRequest. `seed` is used when the request gave none.
GenerationRequest build_generation_request(const ParsedRequest& parsed, const ServingEngine& engine,
                                           const ModelFacts& facts, uint64_t seed);

// The checks on a tokenized prompt (split out for unit tests): 1 .. context-1 tokens, ids < vocab_size.
void check_prompt(const std::vector<int32_t>& prompt, Endpoint endpoint, const ModelFacts& facts);

}  // namespace ferry::server
