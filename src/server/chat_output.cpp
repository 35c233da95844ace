#include "server/chat_output.h"

namespace ferry::server {

ChatOutputParser::ChatOutputParser(const ChatOutputOptions& options) : options_(options) {
  if (options_.split_reasoning) reasoning_.emplace(options_.starts_in_reasoning);
  if (options_.tools) tools_ = make_tool_call_parser(*options_.tools, options_.id_seed);
}

ChatDelta ChatOutputParser::route(ReasoningSplit split, bool at_end) {
  ChatDelta d;
  reasoning_text_ += split.reasoning;
  if (options_.include_reasoning) d.reasoning = std::move(split.reasoning);
  content_raw_ += split.content;
  if (tools_) {
    ParsedText p = tools_->feed(split.content);
    if (at_end) {
      ParsedText rest = tools_->finish();
      p.content += rest.content;
      for (ToolCallDelta& c : rest.calls) {
        if (!p.calls.empty() && p.calls.back().index == c.index && c.id.empty()) p.calls.back().arguments += c.arguments;
        else p.calls.push_back(std::move(c));
      }
    }
    d.content = std::move(p.content);
    d.calls = std::move(p.calls);
  } else {
    d.content = std::move(split.content);
  }
  content_ += d.content;
  return d;
}

ChatDelta ChatOutputParser::feed(std::string_view text) {
  return route(reasoning_ ? reasoning_->feed(text) : ReasoningSplit{"", std::string(text)}, false);
}

ChatDelta ChatOutputParser::finish() { return route(reasoning_ ? reasoning_->finish() : ReasoningSplit{}, true); }

bool ChatOutputParser::called_tools() const { return tools_ && !tools_->failed() && !tools_->calls().empty(); }

ChatMessageOut ChatOutputParser::message() const {
  ChatMessageOut m;
  if (reasoning_ && options_.include_reasoning) m.reasoning = reasoning_text_;
  if (tools_ && tools_->failed()) {
    m.content = content_raw_;
  } else {
    if (tools_) m.tool_calls = tools_->calls();
    if (!content_.empty() || m.tool_calls.empty()) m.content = content_;
  }
  return m;
}

}  // namespace ferry::server
