#include "server/json_tool_call_parser.h"

#include <utility>

#include <nlohmann/json.hpp>

namespace ferry::server {
namespace {

bool blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

bool list_format(ToolCallFormat f) {
  return f == ToolCallFormat::Mistral || f == ToolCallFormat::CommandR || f == ToolCallFormat::CommandR7b;
}

std::string_view open_marker(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes: return "<tool_call>";
    case ToolCallFormat::Mistral: return "[TOOL_CALLS]";
    case ToolCallFormat::CommandR: return "Action:";
    case ToolCallFormat::CommandR7b: return "<|START_ACTION|>";
    default: return "<|python_tag|>";
  }
}

// The text after a call (Hermes) or the list (Command R); "" : none.
std::string_view close_marker(ToolCallFormat f) {
  return f == ToolCallFormat::Hermes ? "</tool_call>" : f == ToolCallFormat::CommandR ? "```"
                                                      : f == ToolCallFormat::CommandR7b ? "<|END_ACTION|>" : "";
}

constexpr std::string_view kJsonFence = "```json";  // Command R's list is in a fenced block

// The first byte of a call written without its (control-token) marker; 0: the format always writes one.
char bare_start(ToolCallFormat f) {
  return f == ToolCallFormat::Llama3 ? '{' : f == ToolCallFormat::Mistral || f == ToolCallFormat::CommandR7b ? '[' : 0;
}

bool is_name_key(ToolCallFormat f, const std::string& key) { return key == name_key(f); }

bool is_arguments_key(ToolCallFormat f, const std::string& key) {
  return key == arguments_key(f) || (f == ToolCallFormat::Llama3 && key == "arguments");
}

}  // namespace

JsonToolCallParser::JsonToolCallParser(ToolCallFormat format, uint64_t id_seed)
    : ToolCallParser(format, id_seed), call_depth_(list_format(format) ? 2 : 1) {}

ParsedText JsonToolCallParser::feed(std::string_view text) {
  pending_ += text;
  ParsedText out;
  for (;;) {
    const size_t before = pending_.size();
    const Mode mode = mode_;
    switch (mode_) {
      case Mode::Content: step_content(out, false); break;
      case Mode::AfterMarker: step_after_marker(out); break;
      case Mode::Json: step_json(out); break;
      case Mode::AfterCall: step_after_call(out, false); break;
      case Mode::Plain:
        out.content += pending_;
        pending_.clear();
        break;
    }
    if (pending_.size() == before && mode_ == mode) break;
  }
  return out;
}

ParsedText JsonToolCallParser::finish() {
  ParsedText out = feed("");
  switch (mode_) {
    case Mode::Content: step_content(out, true); break;
    case Mode::AfterCall: step_after_call(out, true); break;
    case Mode::AfterMarker: fail(out); break;  // a marker and nothing after it
    case Mode::Json:  // cut off (max_tokens): the complete calls stay, the open one is dropped
      if (!committed_) revert(out);
      else truncated_ = !call_text_.empty() || !list_format(format_);
      mode_ = Mode::Plain;
      break;
    case Mode::Plain: break;
  }
  out.content += pending_;
  pending_.clear();
  return out;
}

void JsonToolCallParser::step_content(ParsedText& out, bool at_end) {
  if (at_start_ || drop_blanks_) {
    size_t i = 0;
    while (i < pending_.size() && blank(pending_[i])) ++i;
    if (i == pending_.size()) {  // only blanks so far: held (at the start) or dropped (after a call)
      if (drop_blanks_) pending_.clear();
      else if (at_end) out.content += std::exchange(pending_, {});
      return;
    }
    const std::string_view rest = std::string_view(pending_).substr(i);
    const std::string_view marker = open_marker(format_);
    if (at_start_ && !at_end && rest.size() < marker.size() && marker.starts_with(rest)) return;  // the marker may come
    const bool start = at_start_ && !rest.starts_with(marker);  // "[TOOL_CALLS]" is a marker, not a bare "["
    at_start_ = false;
    if (drop_blanks_) {
      drop_blanks_ = false;
      pending_.erase(0, i);
      i = 0;
    }
    if (start && bare_start(format_) != 0 && pending_[i] == bare_start(format_)) {
      held_ = pending_.substr(0, i);
      pending_.erase(0, i);
      committed_ = false;
      enter_json();
      return;
    }
  }
  const std::string_view marker = open_marker(format_);
  if (const size_t at = pending_.find(marker); at != std::string::npos) {
    out.content += pending_.substr(0, at);
    pending_.erase(0, at + marker.size());
    committed_ = true;
    fence_done_ = false;
    mode_ = Mode::AfterMarker;
    return;
  }
  const size_t keep = at_end ? 0 : partial_suffix(pending_, marker);
  out.content += pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
}

void JsonToolCallParser::step_after_marker(ParsedText& out) {
  size_t i = 0;
  while (i < pending_.size() && blank(pending_[i])) ++i;
  pending_.erase(0, i);
  if (pending_.empty()) return;
  if (format_ == ToolCallFormat::CommandR && !fence_done_) {  // Action:\n```json\n[ ... (the fence may be left out)
    if (pending_.size() < kJsonFence.size() && kJsonFence.starts_with(pending_)) return;  // it may still come
    fence_done_ = true;
    const size_t fence = pending_.starts_with(kJsonFence) ? kJsonFence.size() : pending_.starts_with("```") ? 3 : 0;
    if (fence > 0) {
      pending_.erase(0, fence);
      return;  // blanks after the fence next
    }
  }
  if (pending_[0] != (list_format(format_) ? '[' : '{')) return fail(out);
  enter_json();
}

void JsonToolCallParser::enter_json() {
  mode_ = Mode::Json;
  stack_.clear();
  in_string_ = escape_ = string_is_key_ = false;
  call_text_.clear();
}

void JsonToolCallParser::step_json(ParsedText& out) {
  size_t i = 0;
  while (i < pending_.size() && mode_ == Mode::Json) {
    const char c = pending_[i++];
    if (!committed_) held_ += c;
    scan_char(c, out);
    // After every byte, not every piece: what a fault later hands back (and which fragments went out before
    // it) must not depend on where the stream was split.
    if (mode_ == Mode::Json) announce(out);
  }
  pending_.erase(0, i);
}

void JsonToolCallParser::begin_call() {
  call_text_ = "{";
  slot_ = Slot::Key;
  key_.clear();
  name_.clear();
  args_.clear();
  name_done_ = args_done_ = args_open_ = announced_ = false;
  args_emitted_ = 0;
  first_key_checked_ = false;
}

void JsonToolCallParser::scan_char(char c, ParsedText& out) {
  if (!call_text_.empty()) call_text_ += c;
  if (in_string_) {
    if (string_is_key_) key_raw_ += c;
    if (escape_) {
      escape_ = false;
    } else if (c == '\\') {
      escape_ = true;
    } else if (c == '"') {
      in_string_ = false;
      if (string_is_key_) {
        string_is_key_ = false;
        on_key(out);
      } else if (value_is_string_ && stack_.size() == call_depth_) {
        end_value(call_text_.size(), out);
      }
    }
    return;
  }
  const size_t depth = stack_.size();
  const bool at_keys = !call_text_.empty() && depth == call_depth_;
  if (at_keys && slot_ == Slot::InValue) {  // a number or literal at the call's level ends at a delimiter
    if (!blank(c) && c != ',' && c != '}') return;
    end_value(call_text_.size() - 1, out);
    if (mode_ != Mode::Json) return;
  }
  if (blank(c)) return;
  if (at_keys) {
    switch (slot_) {
      case Slot::Key:
        if (c == '"') {
          in_string_ = string_is_key_ = true;
          key_raw_ = "\"";
          return;
        }
        if (c == '}' && !first_key_checked_) break;  // {}: handled as a close below
        return fault(out);
      case Slot::Colon:
        if (c != ':') return fault(out);
        slot_ = Slot::Value;
        return;
      case Slot::Value:
        value_start_ = call_text_.size() - 1;
        value_is_string_ = c == '"';
        args_open_ = !args_done_ && is_arguments_key(format_, key_) && (c == '{' || c == '[');  // the first one counts
        if (c == '"') {
          in_string_ = true;
          slot_ = Slot::InString;
          return;
        }
        if (c == '{' || c == '[') {
          stack_.push_back(c);
          slot_ = Slot::InContainer;
          return;
        }
        if (c == '}' || c == ']' || c == ',' || c == ':') return fault(out);
        slot_ = Slot::InValue;
        return;
      case Slot::Comma:
        if (c == ',') {
          slot_ = Slot::Key;
          return;
        }
        if (c == '}') break;
        return fault(out);
      case Slot::InValue:
      case Slot::InString:
      case Slot::InContainer:
        return fault(out);
    }
  }
  if (c == '"' && !call_text_.empty()) {  // a string inside a nested value: brackets in it are text
    in_string_ = true;
    string_is_key_ = false;
    return;
  }
  if (c == '{' || c == '[') {
    if (call_text_.empty()) {  // outside a call: a call opens at its depth, Mistral's list at depth 0
      if (c == '{' && depth == call_depth_ - 1) {
        stack_.push_back(c);
        begin_call();
        return;
      }
      if (c == '[' && depth == 0 && call_depth_ == 2) {
        stack_.push_back(c);
        return;
      }
      return fault(out);
    }
    stack_.push_back(c);
    return;
  }
  if (c == '}' || c == ']') {
    if (stack_.empty() || stack_.back() != (c == '}' ? '{' : '[')) return fault(out);
    stack_.pop_back();
    if (!call_text_.empty() && stack_.size() == call_depth_) {
      end_value(call_text_.size(), out);  // a container value at the call's level closed
    } else if (!call_text_.empty() && stack_.size() == call_depth_ - 1) {
      end_call(out);
    } else if (call_text_.empty() && stack_.empty()) {
      mode_ = Mode::AfterCall;  // Mistral's list closed
    }
    return;
  }
  if (call_text_.empty()) {
    if (c == ',' && depth == 1 && call_depth_ == 2) return;  // between Mistral's calls
    return fault(out);
  }
  // inside a nested value: numbers, literals, commas and colons pass
}

void JsonToolCallParser::on_key(ParsedText& out) {
  key_.clear();
  if (const auto k = nlohmann::json::parse(key_raw_, nullptr, false); k.is_string()) key_ = k.get<std::string>();
  else return fault(out);
  slot_ = Slot::Colon;
  if (first_key_checked_) return;
  first_key_checked_ = true;
  if (committed_) return;
  // A bare start whose first key is a call's is a call (Command R7B's calls open with their "tool_call_id").
  const bool call_key = is_name_key(format_, key_) || is_arguments_key(format_, key_) ||
                        (format_ == ToolCallFormat::CommandR7b && key_ == "tool_call_id");
  if (!call_key) return revert(out);
  committed_ = true;
  held_.clear();
}

void JsonToolCallParser::end_value(size_t end, ParsedText& out) {
  slot_ = Slot::Comma;
  const std::string text = call_text_.substr(value_start_, end - value_start_);
  if (is_name_key(format_, key_)) {
    const auto v = nlohmann::json::parse(text, nullptr, false);
    if (!v.is_string() || v.get<std::string>().empty()) return fault(out);
    name_ = v.get<std::string>();
    name_done_ = true;
    announce(out);
  } else if (is_arguments_key(format_, key_) && !args_done_) {
    if (value_is_string_) {  // arguments given as a JSON string holding the object
      const auto v = nlohmann::json::parse(text, nullptr, false);
      if (!v.is_string()) return fault(out);
      args_ = v.get<std::string>();
    } else {
      args_ = text;
    }
    args_open_ = false;
    args_done_ = true;
  }
  args_open_ = false;
}

void JsonToolCallParser::announce(ParsedText& out) {
  if (!committed_ || !name_done_) return;
  if (!announced_) {
    announced_ = true;
    id_ = new_id();
    out.calls.push_back({calls_.size(), id_, name_, ""});
  }
  std::string fragment;
  if (args_open_ && call_text_.size() > value_start_ + args_emitted_) {
    fragment = call_text_.substr(value_start_ + args_emitted_);
  } else if (args_done_ && args_.size() > args_emitted_) {
    fragment = args_.substr(args_emitted_);
  }
  if (fragment.empty()) return;
  args_emitted_ += fragment.size();
  if (!out.calls.empty() && out.calls.back().index == calls_.size()) out.calls.back().arguments += fragment;
  else out.calls.push_back({calls_.size(), "", "", fragment});
}

void JsonToolCallParser::end_call(ParsedText& out) {
  if (!committed_ || !name_done_) return fault(out);
  if (!args_done_) {
    args_ = "{}";  // a call without arguments
    args_done_ = true;
  }
  const auto args = nlohmann::json::parse(args_, nullptr, false);
  if (!nlohmann::json::accept(call_text_) || !args.is_object()) return fault(out);
  announce(out);
  calls_.push_back({id_, name_, args_});
  call_text_.clear();
  announced_ = name_done_ = args_done_ = args_open_ = false;
  if (call_depth_ == 1) mode_ = Mode::AfterCall;
}

void JsonToolCallParser::step_after_call(ParsedText& out, bool at_end) {
  size_t i = 0;
  while (i < pending_.size() && blank(pending_[i])) ++i;
  const std::string_view rest = std::string_view(pending_).substr(i);
  if (const std::string_view close = close_marker(format_); !close.empty()) {
    if (rest.starts_with(close)) {
      pending_.erase(0, i + close.size());
    } else if (!at_end && close.starts_with(rest)) {
      return;  // the close tag may still come
    }
  } else if (format_ == ToolCallFormat::Llama3) {  // "; {" : another call; anything else: content
    if (rest.empty() && !at_end) return;
    if (!after_semicolon_ && !rest.empty() && rest[0] == ';') {
      pending_.erase(0, i + 1);
      after_semicolon_ = true;
      return;
    }
    if (after_semicolon_ && !rest.empty() && rest[0] == '{') {
      after_semicolon_ = false;
      pending_.erase(0, i);
      enter_json();
      return;
    }
    after_semicolon_ = false;
  }
  mode_ = Mode::Content;
  drop_blanks_ = true;
}

void JsonToolCallParser::fault(ParsedText& out) {
  if (committed_) fail(out);
  else revert(out);
}

void JsonToolCallParser::fail(ParsedText& out) {
  failed_ = true;
  if (!announced_) out.content += call_text_;
  call_text_.clear();
  announced_ = false;
  mode_ = Mode::Plain;
}

void JsonToolCallParser::revert(ParsedText& out) {
  out.content += std::exchange(held_, {});
  call_text_.clear();
  mode_ = Mode::Content;
}

}  // namespace ferry::server
