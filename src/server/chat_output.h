// One choice's generated text turned into what a chat response carries: reasoning_content (reasoning_parser.h),
// content, and tool calls (tool_call_parser.h), in this order: the reasoning block comes first, and tool
// calls are parsed in the content after it. Streaming and whole responses use the same parser, so a stream's
// deltas add up to the whole response's message (except after a malformed call; see message()).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"

namespace ferry::server {

struct ChatOutputOptions {
  bool split_reasoning = false;      // the template thinks and the request did not turn the split off
  bool starts_in_reasoning = false;  // the prompt left a <think> block open
  bool include_reasoning = true;     // false: the reasoning is dropped from the response (vLLM's include_reasoning)
  std::optional<ToolCallFormat> tools;  // parse tool calls in this markup (tools given, tool_choice not none)
  uint64_t id_seed = 0;              // call ids
};

struct ChatDelta {
  std::string reasoning, content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

// The whole message: content is null (nullopt) when the answer is tool calls only; reasoning is nullopt when
// the split is off. A malformed tool call (ToolCallParser::failed) gives no tool_calls and the content text
// as the model wrote it (vLLM's behaviour; a stream has already sent the call's deltas).
struct ChatMessageOut {
  std::optional<std::string> content;
  std::optional<std::string> reasoning;
  std::vector<ToolCall> tool_calls;
};

class ChatOutputParser {
 public:
  explicit ChatOutputParser(const ChatOutputOptions& options);
  ChatDelta feed(std::string_view text);
  ChatDelta finish();
  ChatMessageOut message() const;  // after finish()
  bool called_tools() const;       // complete tool calls and no malformed one

 private:
  ChatDelta route(ReasoningSplit split, bool at_end);

  ChatOutputOptions options_;
  std::optional<ReasoningParser> reasoning_;
  std::unique_ptr<ToolCallParser> tools_;
  std::string reasoning_text_, content_raw_, content_;
};

}  // namespace ferry::server
