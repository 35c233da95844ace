// Parses and validates the JSON body of POST /v1/chat/completions and /v1/completions into a ParsedRequest.
// Everything here is independent of the model (fuzzed by tests/fuzz/openai_request_fuzz.cpp); turning the
// messages or prompt into tokens happens in the route (build_generation_request). Any bad input throws
// ApiError(400) naming the parameter; nothing else escapes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ferry/engine.h"
#include "ferry/sampling.h"
#include "ferry/serving.h"
#include "server/tool_request.h"

namespace ferry::server {

enum class Endpoint { Chat, Completion };

struct RequestLimits {
  size_t max_json_depth = 64;     // nesting of arrays/objects (checked before parsing)
  size_t max_stop_strings = 16;
  size_t max_stop_bytes = 1024;   // per stop string
  int32_t max_top_logprobs = 20;
  int32_t max_n = 16;             // choices per request
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::Chat;
  std::string model;                      // "" when absent
  std::vector<ChatTurn> messages;         // chat: 1+ turns (roles system/user/assistant/tool; developer -> system)
  // chat: the same messages as the chat template reads them: {"role", "content" (null when absent), and
  // "tool_calls" (arguments as JSON objects), "tool_call_id", "name", an assistant's "reasoning_content" where given}
  nlohmann::ordered_json template_messages;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
  ToolRequest tools;                      // tools, tool_choice, parallel_tool_calls
  std::optional<bool> split_reasoning;    // reasoning_format: none -> false, auto/deepseek/parsed -> true; absent:
                                          // the server's default
  bool include_reasoning = true;          // vLLM's include_reasoning: false drops reasoning_content
  int32_t n = 1;                          // choices
  std::optional<std::string> prompt_text; // completions: a string prompt
  std::vector<int32_t> prompt_tokens;     // completions: a prompt given as token ids (not range-checked here)
  bool prompt_absent = false;             // completions: no prompt (or null): OpenAI's "<|endoftext|>", a new document
  SamplingParams sampling;                // OpenAI defaults (temperature 1, top_p 1, top_k/min_p off)
  bool seed_given = false;                // false: the route draws a random seed
  std::optional<int32_t> max_tokens;      // absent: chat -> rest of the context, completions -> 16
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;             // stream_options.include_usage
  bool ignore_eos = false;                // vLLM's extension: generate exactly max_tokens
  std::string cache_salt;                 // vLLM's extension: prefix-cache partition ("" : the caller's default)
  int32_t logprobs = -1;                  // -1: none; else the number of top alternatives per token
  // response_format: text, json_object, json_schema ({"json_schema": {"name", "schema", "strict"}}), and the
  // extensions {"type": "regex", "regex": "..."} and {"type": "grammar", "grammar": "<GBNF>"}.
  OutputFormat format;
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> bias (-100..100); ids checked by the engine
  // ferry's extension: "spec": "off" | "ngram" | "draft" (absent: the server's --spec), "spec_k": 1..16 (absent:
  // the server's --spec-k): speculative decoding for this request, the same tokens as without.
  std::optional<SpecMode> spec;
  int32_t spec_k = 0;
};

// Throws ApiError(400) for malformed JSON (param null) or a bad parameter (param named).
ParsedRequest parse_request(Endpoint endpoint, std::string_view body, const RequestLimits& limits = {});

}  // namespace ferry::server
