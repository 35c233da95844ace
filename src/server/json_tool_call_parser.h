// The tool-call parser (tool_call_parser.h) of the families whose call is a JSON object holding the name:
//
//   Hermes:     content, then <tool_call>{json}</tool_call> blocks (whitespace between them is dropped)
//   Llama3:     the whole output is {json} calls separated by ";" (<|python_tag|> is a control token: no text)
//   Mistral:    [TOOL_CALLS] (a control token: no text, so the output starts with "[") then a JSON list of calls
//   CommandR:   content, then Action: and a JSON list of calls in a ```json fence
//   CommandR7b: <|START_ACTION|> (a control token) then a JSON list of calls, then <|END_ACTION|>
//
// A call is {"name": "...", "arguments" (Llama 3: "parameters"): {...}}, Command R's {"tool_name": "...",
// "parameters": {...}} (other keys, like R7B's "tool_call_id", are skipped). Output that only looks like the
// start of a bare call (Llama3 / Mistral / CommandR7b: the first non-blank byte is "{" / "[") is held back
// until its first key says: the name or the arguments key commits it; anything else, or invalid JSON, hands
// the held text back as content. A small JSON scanner tracks the call object's own keys, so the arguments'
// bytes go out as generated.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_call_parser.h"

namespace ferry::server {

class JsonToolCallParser final : public ToolCallParser {
 public:
  JsonToolCallParser(ToolCallFormat format, uint64_t id_seed);

  ParsedText feed(std::string_view text) override;
  ParsedText finish() override;

 private:
  enum class Mode { Content, AfterMarker, Json, AfterCall, Plain };
  // Where the scanner is at a call object's own level: before a key, after it, before its value, inside a
  // number/literal, a string or a container value, after the value.
  enum class Slot { Key, Colon, Value, InValue, InString, InContainer, Comma };

  void step_content(ParsedText& out, bool at_end);
  void step_after_marker(ParsedText& out);
  void step_json(ParsedText& out);
  void step_after_call(ParsedText& out, bool at_end);
  void enter_json();
  void scan_char(char c, ParsedText& out);
  void on_key(ParsedText& out);
  void begin_call();
  void end_value(size_t end, ParsedText& out);
  void end_call(ParsedText& out);
  void announce(ParsedText& out);
  void fault(ParsedText& out);  // fail() when committed, else revert()
  void fail(ParsedText& out);
  void revert(ParsedText& out);

  Mode mode_ = Mode::Content;
  std::string pending_;     // unconsumed text
  bool at_start_ = true;    // nothing but blanks seen so far
  bool drop_blanks_ = false; // after a call: blanks before the next call or text are dropped
  bool after_semicolon_ = false;  // Llama 3: a ";" after a call, waiting for the next "{"
  bool fence_done_ = false;       // Command R: the ```json fence after Action: was read (or was not there)
  bool committed_ = false;  // a bare start became a call (or a marker opened one)
  std::string held_;        // a bare start's raw text, handed back as content if it is not a call
  size_t call_depth_ = 1;   // nesting at which a call object's keys live (Mistral: 2, inside the list)

  // JSON scanner state
  std::vector<char> stack_;
  bool in_string_ = false, escape_ = false, string_is_key_ = false;
  Slot slot_ = Slot::Key;
  std::string call_text_;     // the current call object's raw text (empty: not inside a call)
  std::string key_raw_, key_; // the key being read (JSON text) and the last key read
  bool value_is_string_ = false;
  size_t value_start_ = 0;    // offset of the current value in call_text_
  bool first_key_checked_ = false;

  // the current call
  std::string id_, name_, args_;
  bool name_done_ = false, args_done_ = false, args_open_ = false, announced_ = false;
  size_t args_emitted_ = 0;  // bytes of the open arguments value already emitted
};

}  // namespace ferry::server
