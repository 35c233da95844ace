#include "server/named_tool_call_parser.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

namespace ferry::server {
namespace {

constexpr size_t kMaxNameBytes = 256;
constexpr std::string_view kJsonFence = "```json";
constexpr std::string_view kFence = "```";
constexpr std::string_view kContentRecipient = "all";  // Functionary v3.2's ">>>all\n": text for the user

bool blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':';
}

bool is_deepseek(ToolCallFormat f) { return f == ToolCallFormat::DeepSeekV3 || f == ToolCallFormat::DeepSeekV31; }

NamedToolCallParser::Markup markup_of(ToolCallFormat f) {
  if (is_deepseek(f))
    return {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"};
  if (f == ToolCallFormat::FunctionaryV31) return {"", "<function=", ">", "</function>", ""};
  return {"", ">>>", "\n", "", ""};  // FunctionaryV32
}

// The text may still become `marker` (a proper prefix of it).
bool may_become(std::string_view text, std::string_view marker) {
  return !marker.empty() && text.size() < marker.size() && marker.starts_with(text);
}

}  // namespace

NamedToolCallParser::NamedToolCallParser(ToolCallFormat format, uint64_t id_seed)
    : ToolCallParser(format, id_seed), markup_(markup_of(format)) {
  if (format == ToolCallFormat::FunctionaryV32) {  // the prompt ends with ">>>": a recipient line comes first
    stage_ = Stage::Name;
    committed_ = false;
  }
}

ParsedText NamedToolCallParser::feed(std::string_view text) {
  pending_ += text;
  ParsedText out;
  while (step(out, false)) {
  }
  return out;
}

ParsedText NamedToolCallParser::finish() {
  ParsedText out;
  while (step(out, true)) {
  }
  switch (stage_) {
    case Stage::Section:
    case Stage::Name:
    case Stage::AfterSep:
    case Stage::TypedName:
    case Stage::BeforeArgs:
    case Stage::Args:  // cut off inside a call (max_tokens): the complete calls stay, the open one is dropped
      truncated_ = true;
      pending_.clear();
      break;
    default:
      out.content += pending_;
      pending_.clear();
      break;
  }
  return out;
}

bool NamedToolCallParser::step(ParsedText& out, bool at_end) {
  switch (stage_) {
    case Stage::Content: return step_content(out, at_end);
    case Stage::Section: {
      if (!skip_blanks()) return false;
      if (pending_.starts_with(markup_.call_open)) {
        pending_.erase(0, markup_.call_open.size());
        stage_ = Stage::Name;
        return true;
      }
      if (pending_.starts_with(markup_.section_close)) {  // an empty list of calls
        pending_.erase(0, markup_.section_close.size());
        stage_ = Stage::Between;
        return true;
      }
      if (!at_end && (may_become(pending_, markup_.call_open) || may_become(pending_, markup_.section_close))) return false;
      return fail();
    }
    case Stage::Name:
    case Stage::TypedName: return step_name(out, at_end);
    case Stage::AfterSep: {  // DeepSeek: "{" or a fence next: the head was the name (V3.1); else its type (V3)
      if (!skip_blanks()) return false;
      if (pending_[0] == '{' || pending_[0] == '`') {
        name_ = head_;
        announce(out);
        stage_ = Stage::BeforeArgs;
      } else {
        stage_ = Stage::TypedName;
      }
      return true;
    }
    case Stage::BeforeArgs: return step_before_args(out, at_end);
    case Stage::Args: return step_args(out);
    case Stage::AfterArgs: return step_after_args(at_end);
    case Stage::Between: return step_between(at_end);
    case Stage::Plain:
      if (pending_.empty()) return false;
      out.content += pending_;
      pending_.clear();
      return true;
  }
  return false;
}

bool NamedToolCallParser::step_content(ParsedText& out, bool at_end) {
  if (pending_.empty()) return false;
  size_t at = std::string::npos, len = 0;
  for (const std::string_view m : {markup_.section_open, markup_.call_open}) {
    if (m.empty()) continue;
    if (const size_t i = pending_.find(m); i < at) {
      at = i;
      len = m.size();
    }
  }
  if (at != std::string::npos) {
    out.content += pending_.substr(0, at);
    const bool section = !markup_.section_open.empty() && pending_.compare(at, len, markup_.section_open) == 0;
    pending_.erase(0, at + len);
    committed_ = true;
    stage_ = section ? Stage::Section : Stage::Name;
    return true;
  }
  size_t keep = 0;
  if (!at_end)
    for (const std::string_view m : {markup_.section_open, markup_.call_open})
      if (!m.empty()) keep = std::max(keep, partial_suffix(pending_, m));
  if (pending_.size() == keep) return false;
  out.content += pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return true;
}

NamedToolCallParser::NameRead NamedToolCallParser::read_name(std::string_view terminator, std::string& name) const {
  for (size_t i = 0; i < pending_.size(); ++i) {
    const std::string_view rest = std::string_view(pending_).substr(i);
    if (rest.starts_with(terminator)) {
      if (i == 0) return NameRead::Bad;
      name = pending_.substr(0, i);
      return NameRead::Done;
    }
    if (may_become(rest, terminator)) return NameRead::NeedMore;
    if (!name_char(pending_[i]) || i >= kMaxNameBytes) return NameRead::Bad;
  }
  return NameRead::NeedMore;
}

bool NamedToolCallParser::step_name(ParsedText& out, bool at_end) {
  const bool typed = stage_ == Stage::TypedName;
  const std::string_view terminator = typed ? std::string_view("\n") : markup_.name_end;
  std::string name;
  const NameRead r = read_name(terminator, name);
  if (r == NameRead::NeedMore) {
    if (!at_end || committed_) return false;  // at the end, finish() drops a committed call
    stage_ = Stage::Content;                  // Functionary v3.2's first line without a newline: text
    return true;
  }
  if (r == NameRead::Bad) {
    if (committed_) return fail();
    stage_ = Stage::Content;  // Functionary v3.2's first line is not a recipient: it is text
    return true;
  }
  pending_.erase(0, name.size() + terminator.size());
  if (!committed_ || format_ == ToolCallFormat::FunctionaryV32) {
    committed_ = true;
    if (name == kContentRecipient) {
      stage_ = Stage::Content;
      return true;
    }
  }
  if (is_deepseek(format_) && !typed) {
    head_ = name;
    stage_ = Stage::AfterSep;
    return true;
  }
  name_ = name;
  announce(out);
  stage_ = Stage::BeforeArgs;
  return true;
}

void NamedToolCallParser::announce(ParsedText& out) {
  id_ = new_id();
  args_.clear();
  depth_ = 0;
  in_string_ = escape_ = false;
  out.calls.push_back({calls_.size(), id_, name_, ""});
}

bool NamedToolCallParser::step_before_args(ParsedText& out, bool at_end) {
  if (!skip_blanks()) return false;
  if (!fence_open_ && pending_[0] == '`') {
    if (!at_end && may_become(pending_, kJsonFence)) return false;
    if (!pending_.starts_with(kFence)) return fail();
    pending_.erase(0, pending_.starts_with(kJsonFence) ? kJsonFence.size() : kFence.size());
    fence_open_ = true;
    return true;
  }
  if (pending_[0] != '{') return fail();
  (void)out;
  stage_ = Stage::Args;
  return true;
}

bool NamedToolCallParser::step_args(ParsedText& out) {
  if (pending_.empty()) return false;
  size_t i = 0;
  bool closed = false;
  while (i < pending_.size() && !closed) {
    const char c = pending_[i++];
    if (in_string_) {
      if (escape_) escape_ = false;
      else if (c == '\\') escape_ = true;
      else if (c == '"') in_string_ = false;
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      closed = --depth_ == 0;
    }
  }
  const std::string fragment = pending_.substr(0, i);
  pending_.erase(0, i);
  args_ += fragment;
  if (!out.calls.empty() && out.calls.back().index == calls_.size()) out.calls.back().arguments += fragment;
  else out.calls.push_back({calls_.size(), "", "", fragment});
  if (closed) {
    if (!nlohmann::json::accept(args_) || !nlohmann::json::parse(args_).is_object()) return fail();
    calls_.push_back({id_, name_, args_});
    stage_ = Stage::AfterArgs;
  }
  return true;
}

bool NamedToolCallParser::step_after_args(bool at_end) {
  size_t i = 0;
  while (i < pending_.size() && blank(pending_[i])) ++i;
  const std::string_view rest = std::string_view(pending_).substr(i);
  if (rest.empty() && !at_end) return false;
  if (fence_open_) {
    if (!at_end && may_become(rest, kFence)) return false;
    if (rest.starts_with(kFence)) {
      pending_.erase(0, i + kFence.size());
      fence_open_ = false;
      return true;
    }
    fence_open_ = false;  // an unclosed fence: what follows decides
  }
  const std::string_view close = markup_.call_close;
  if (!close.empty() && !at_end && may_become(rest, close)) return false;
  pending_.erase(0, i + (!close.empty() && rest.starts_with(close) ? close.size() : 0));
  stage_ = Stage::Between;
  return true;
}

bool NamedToolCallParser::step_between(bool at_end) {
  size_t i = 0;
  while (i < pending_.size() && blank(pending_[i])) ++i;
  pending_.erase(0, i);  // blanks between calls, or after the last one, are dropped
  if (pending_.empty()) return false;
  if (pending_.starts_with(markup_.call_open)) {
    pending_.erase(0, markup_.call_open.size());
    stage_ = Stage::Name;
    return true;
  }
  if (!markup_.section_close.empty() && pending_.starts_with(markup_.section_close)) {
    pending_.erase(0, markup_.section_close.size());
    stage_ = Stage::Between;  // blanks after the section are dropped too; then text or another section
    return true;
  }
  if (!at_end && (may_become(pending_, markup_.call_open) || may_become(pending_, markup_.section_close))) return false;
  stage_ = Stage::Content;
  return true;
}

bool NamedToolCallParser::skip_blanks() {
  size_t i = 0;
  while (i < pending_.size() && blank(pending_[i])) ++i;
  pending_.erase(0, i);
  return !pending_.empty();
}

bool NamedToolCallParser::fail() {
  failed_ = true;
  stage_ = Stage::Plain;
  return true;
}

}  // namespace ferry::server
