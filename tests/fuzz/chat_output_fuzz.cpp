// Fuzz target: arbitrary bytes as a model's output, through the chat output parser (reasoning split, then
// tool calls in each markup). The first byte picks the markup (its low bits 3: the next byte picks no tools
// or one of the later families), whether the prompt opened a <think> block and the stream's piece size; the
// rest is the text. Checked: no crash or hang; the same result whether the text
// arrives whole or in pieces; the streamed deltas add up to the whole message (content, reasoning, each
// complete call's id, name and arguments); every complete call's arguments are a JSON object.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/chat_output.h"

namespace {

using namespace ferry::server;

// Says which property broke, then crashes (the fuzzer keeps the input).
[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "chat_output_fuzz: %s\n", what);
  __builtin_trap();
}

struct Collected {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
};

void take(Collected& c, const ChatDelta& d) {
  c.reasoning += d.reasoning;
  c.content += d.content;
  for (const ToolCallDelta& t : d.calls) {
    if (!t.id.empty()) {
      if (t.index != c.calls.size()) broken("a new call's index is not the next one");
      c.calls.push_back({t.id, t.name, t.arguments});
    } else {
      if (c.calls.empty() || t.index + 1 != c.calls.size()) broken("an arguments fragment of a call not open");
      c.calls.back().arguments += t.arguments;
    }
  }
}

Collected run(const ChatOutputOptions& o, std::string_view text, size_t piece, ChatMessageOut& message, bool& called) {
  ChatOutputParser p(o);
  Collected c;
  for (size_t i = 0; i < text.size(); i += piece) take(c, p.feed(text.substr(i, piece)));
  take(c, p.finish());
  message = p.message();
  called = p.called_tools();
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  ChatOutputOptions o;
  o.split_reasoning = (mode & 4) != 0;
  o.starts_in_reasoning = (mode & 8) != 0;
  const int f = mode & 3;
  if (f < 3) {
    o.tools = f == 0 ? ToolCallFormat::Hermes : f == 1 ? ToolCallFormat::Llama3 : ToolCallFormat::Mistral;
  } else if (!text.empty()) {  // the next byte: no tools (0) or one of the later families
    constexpr ToolCallFormat kLater[] = {ToolCallFormat::CommandR,    ToolCallFormat::CommandR7b,
                                         ToolCallFormat::DeepSeekV3,  ToolCallFormat::DeepSeekV31,
                                         ToolCallFormat::FunctionaryV31, ToolCallFormat::FunctionaryV32};
    const size_t pick = static_cast<uint8_t>(text[0]) % (std::size(kLater) + 1);
    if (pick > 0) o.tools = kLater[pick - 1];
    text.remove_prefix(1);
  }
  const size_t piece = 1 + (mode >> 4);
  ChatMessageOut whole_msg, split_msg;
  bool whole_called = false, split_called = false;
  const Collected whole = run(o, text, text.size() + 1, whole_msg, whole_called);
  const Collected split = run(o, text, piece, split_msg, split_called);
  if (whole.content != split.content) broken("content differs whole / in pieces");
  if (whole.reasoning != split.reasoning) broken("reasoning differs whole / in pieces");
  if (whole_called != split_called || whole.calls.size() != split.calls.size()) broken("calls differ whole / in pieces");
  for (size_t i = 0; i < whole.calls.size(); ++i)
    if (whole.calls[i].name != split.calls[i].name || whole.calls[i].arguments != split.calls[i].arguments)
      broken("a call differs whole / in pieces");
  if (split_msg.reasoning.value_or("") != split.reasoning) broken("message reasoning is not the streamed one");
  if (split_called) {
    if (split_msg.tool_calls.size() > split.calls.size()) broken("more message calls than streamed ones");
    for (size_t i = 0; i < split_msg.tool_calls.size(); ++i) {
      const ToolCall& c = split_msg.tool_calls[i];
      if (c.id != split.calls[i].id || c.name != split.calls[i].name || c.arguments != split.calls[i].arguments)
        broken("a message call is not the streamed one");
      if (!nlohmann::json::parse(c.arguments, nullptr, false).is_object()) broken("arguments are not a JSON object");
    }
    if (split_msg.content.value_or("") != split.content) broken("message content is not the streamed one");
  }
  return 0;
}
