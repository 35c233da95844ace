// POST /tokenize and /detokenize (also under /v1/): the shapes of llama-server and vLLM both.
//   /tokenize   {"content" | "prompt": "text", "add_special": bool (default true)}
//            -> {"tokens": [ids], "count": n, "max_model_len": context}
//   /detokenize {"tokens": [ids]} -> {"content": "text", "prompt": "text"}
// Bad input throws ApiError(400) naming the field.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "ferry/serving.h"
#include "server/generation.h"

namespace ferry::server {

nlohmann::json tokenize_response(std::string_view body, const ServingEngine& engine, const ModelFacts& facts);
nlohmann::json detokenize_response(std::string_view body, const ServingEngine& engine, const ModelFacts& facts);

}  // namespace ferry::server
