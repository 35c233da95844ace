// The tool-call parser (tool_call_parser.h) of the families that write the function's name in the markup and
// only its arguments as JSON (tool_format.h):
//
//   DeepSeekV3 / DeepSeekV31: content, then <｜tool▁calls▁begin｜> and calls separated by blanks, then
//       <｜tool▁calls▁end｜>. A call is <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>
//       (V3, R1) or <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜> (V3.1); both are read in
//       either family (after <｜tool▁sep｜>, "{" or a fence says the text before it was the name).
//   FunctionaryV31: content, then <function=NAME>{...}</function> calls.
//   FunctionaryV32: the prompt ends with ">>>", so the output starts with a recipient line: NAME\n{...} is a
//       call, all\n is content; ">>>" starts the next one. A first line that is not a name is content.
//
// A name is 1..256 letters, digits and "_-.:"; the arguments are one JSON object, streamed as generated and
// checked when it closes. A ```json fence around the arguments is allowed in every family.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "server/tool_call_parser.h"

namespace ferry::server {

class NamedToolCallParser final : public ToolCallParser {
 public:
  NamedToolCallParser(ToolCallFormat format, uint64_t id_seed);

  ParsedText feed(std::string_view text) override;
  ParsedText finish() override;

  // The literal texts of a family's markup ("" : the family has none).
  struct Markup {
    std::string_view section_open;   // before the calls
    std::string_view call_open;      // before each call
    std::string_view name_end;       // after the name (DeepSeek: after the type or the name)
    std::string_view call_close;     // after each call's arguments
    std::string_view section_close;  // after the calls
  };

 private:
  // Content: text, watching for an opener. Section: after section_open. Name: reading a name (DeepSeek: the
  // type or the name). AfterSep: DeepSeek, which of the two it was. TypedName: DeepSeek V3's name after its
  // type. BeforeArgs: up to the arguments' "{". Args: inside them. AfterArgs: up to call_close. Between:
  // after a call, before the next one, section_close or text. Plain: after a fault, all text is content.
  enum class Stage { Content, Section, Name, AfterSep, TypedName, BeforeArgs, Args, AfterArgs, Between, Plain };
  enum class NameRead { NeedMore, Done, Bad };

  bool step(ParsedText& out, bool at_end);  // one decision; false: nothing to do until more text comes
  bool step_content(ParsedText& out, bool at_end);
  bool step_name(ParsedText& out, bool at_end);
  bool step_before_args(ParsedText& out, bool at_end);
  bool step_args(ParsedText& out);
  bool step_after_args(bool at_end);
  bool step_between(bool at_end);
  NameRead read_name(std::string_view terminator, std::string& name) const;
  bool skip_blanks();  // true: something is left
  void announce(ParsedText& out);
  bool fail();

  Markup markup_;
  Stage stage_ = Stage::Content;
  std::string pending_;       // unconsumed text
  bool committed_ = true;     // false only for Functionary v3.2's first recipient line (the prompt's ">>>")
  bool fence_open_ = false;   // a ```json fence opened before the arguments
  std::string head_;          // DeepSeek: the text before <｜tool▁sep｜> (the type or the name)
  std::string name_, args_;   // the current call
  std::string id_;
  int depth_ = 0;             // nesting inside the arguments
  bool in_string_ = false, escape_ = false;
};

}  // namespace ferry::server
