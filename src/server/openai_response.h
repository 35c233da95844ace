// Builds the response JSON of the OpenAI endpoints in OpenAI's exact shapes: whole responses
// (chat.completion, text_completion), stream chunks (chat.completion.chunk, text_completion), usage and
// logprobs. Strings that may hold partial UTF-8 (token pieces) must be serialized with dump_json().
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "core/check.h"  // ferry::Error, which serving.h uses
#include "ferry/serving.h"
#include "server/openai_request.h"

namespace ferry::server {

struct ResponseMeta {
  std::string id;        // "chatcmpl-<hex>" or "cmpl-<hex>"
  int64_t created = 0;   // Unix seconds
  std::string model;
  Endpoint endpoint = Endpoint::Chat;
};

std::string response_id(Endpoint endpoint, uint64_t request_id, uint64_t salt);

// "stop", "length"; cancelled requests report "abort" (vLLM's word), failed ones "error".
const char* finish_reason_name(FinishReason reason);

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}
nlohmann::json usage_json(const RequestUsage& usage);

// Logprobs of `tokens` in the endpoint's shape. Chat: {"content": [{"token", "logprob", "bytes",
// "top_logprobs": [{"token", "logprob", "bytes"}]}]}. Completions: {"tokens", "token_logprobs",
// "top_logprobs": [{token: logprob}], "text_offset"} with offsets counted from `text_offset0`.
nlohmann::json logprobs_json(Endpoint endpoint, std::span<const GeneratedToken> tokens, size_t text_offset0 = 0);

// The whole (non-streaming) response.
nlohmann::json full_response(const ResponseMeta& meta, const std::string& text, FinishReason finish,
                             const RequestUsage& usage, const std::optional<nlohmann::json>& logprobs);

// One stream chunk. Chat: delta {"role": "assistant", "content": ""} when `role_delta`, else {"content": text}
// (or {} when text is empty and finish is set). `finish` set: the chunk carries finish_reason.
nlohmann::json stream_chunk(const ResponseMeta& meta, const std::string& text, bool role_delta,
                            std::optional<FinishReason> finish, const std::optional<nlohmann::json>& logprobs);

// The final usage chunk of stream_options.include_usage: empty choices, usage filled.
nlohmann::json usage_chunk(const ResponseMeta& meta, const RequestUsage& usage);

// JSON text with invalid UTF-8 replaced by U+FFFD (token pieces can split a character).
std::string dump_json(const nlohmann::json& j);

}  // namespace ferry::server
