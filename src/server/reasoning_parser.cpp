#include "server/reasoning_parser.h"

#include <algorithm>
#include <utility>

namespace ferry::server {
namespace {

constexpr std::string_view kOpen = kReasoningOpen;
constexpr std::string_view kClose = kReasoningClose;

bool blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t partial_suffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

bool template_thinks(std::string_view src) {
  return src.find(kOpen) != std::string_view::npos || src.find(kClose) != std::string_view::npos;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  size_t end = prompt.size();
  while (end > 0 && blank(prompt[end - 1])) --end;
  return prompt.substr(0, end).ends_with(kOpen);
}

bool prompt_closes_reasoning(std::string_view prompt) {
  size_t end = prompt.size();
  while (end > 0 && blank(prompt[end - 1])) --end;
  return prompt.substr(0, end).ends_with(kClose);
}

ReasoningParser::ReasoningParser(bool starts_in_reasoning)
    : state_(starts_in_reasoning ? State::Reasoning : State::Start) {}

ReasoningSplit ReasoningParser::feed(std::string_view text) {
  pending_ += text;
  ReasoningSplit out;
  for (bool progress = true; progress && !pending_.empty();) {
    progress = false;
    switch (state_) {
      case State::Start: {  // "<think>" after blanks opens the block; anything else is content
        size_t i = 0;
        while (i < pending_.size() && blank(pending_[i])) ++i;
        const std::string_view rest = std::string_view(pending_).substr(i);
        if (rest.starts_with(kOpen)) {
          pending_.erase(0, i + kOpen.size());
          state_ = State::Reasoning;
          progress = true;
        } else if (!kOpen.starts_with(rest)) {
          state_ = State::Content;
          progress = true;
        }
        break;
      }
      case State::Reasoning: {
        const size_t at = pending_.find(kClose);
        if (at != std::string::npos) {
          out.reasoning += pending_.substr(0, at);
          pending_.erase(0, at + kClose.size());
          state_ = State::AfterClose;
          progress = true;
        } else {
          const size_t keep = partial_suffix(pending_, kClose);
          out.reasoning += pending_.substr(0, pending_.size() - keep);
          pending_.erase(0, pending_.size() - keep);
        }
        break;
      }
      case State::AfterClose: {  // blanks between </think> and the answer are dropped
        size_t i = 0;
        while (i < pending_.size() && blank(pending_[i])) ++i;
        pending_.erase(0, i);
        if (!pending_.empty()) {
          state_ = State::Content;
          progress = true;
        }
        break;
      }
      case State::Content:
        out.content += std::exchange(pending_, {});
        break;
    }
  }
  return out;
}

ReasoningSplit ReasoningParser::finish() {
  ReasoningSplit out = feed("");
  if (state_ == State::Reasoning) out.reasoning += std::exchange(pending_, {});
  else if (state_ != State::AfterClose) out.content += std::exchange(pending_, {});
  pending_.clear();
  return out;
}

}  // namespace ferry::server
