// Builds the response JSON of the OpenAI endpoints in OpenAI's exact shapes: whole responses
// (chat.completion, text_completion), stream chunks (chat.completion.chunk, text_completion), usage and
// logprobs. Strings that may hold partial UTF-8 (token pieces) must be serialized with dump_json().
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"  // ferry::Error, which serving.h uses
#include "ferry/serving.h"
#include "server/chat_output.h"
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

// One choice of a whole (non-streaming) response.
struct ChoiceResult {
  int32_t index = 0;
  ChatMessageOut message{};     // chat: content (null for tool calls only), reasoning_content, tool_calls
  std::string text{};           // completions
  std::string finish_reason{};  // finish_reason_name(), or "tool_calls"
  std::optional<nlohmann::json> logprobs{};
};

// The whole response: chat {"message": {"role", "content", "refusal": null, ["reasoning_content"],
// ["tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}]]}}, completions {"text"}.
nlohmann::json full_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices, const RequestUsage& usage);

// One choice's piece of a stream chunk. Chat: delta {"role": "assistant", "content": ""} when `role`, else the
// delta's content / reasoning_content / tool_calls ([{"index", "id", "type", "function": {"name",
// "arguments"}}] on a call's first piece, [{"index", "function": {"arguments"}}] after), {} when it has none.
struct ChunkChoice {
  int32_t index = 0;
  bool role = false;
  ChatDelta delta{};            // completions: delta.content is the text
  std::optional<std::string> finish_reason{};
  std::optional<nlohmann::json> logprobs{};
};
nlohmann::json stream_chunk(const ResponseMeta& meta, const ChunkChoice& choice);

// The final usage chunk of stream_options.include_usage: empty choices, usage filled.
nlohmann::json usage_chunk(const ResponseMeta& meta, const RequestUsage& usage);

// JSON text with invalid UTF-8 replaced by U+FFFD (token pieces can split a character).
std::string dump_json(const nlohmann::json& j);

}  // namespace ferry::server
