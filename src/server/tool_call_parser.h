// Splits a model's generated text, as it streams, into content and tool calls in the markup of its
// ToolCallFormat (tool_format.h), emitting OpenAI's streaming pieces: a call's first delta carries its index,
// id and function name, later ones fragments of its arguments, in generation order (the fragments of a call
// concatenate to its final arguments text). Two implementations: json_tool_call_parser.h for the families
// that write the name inside the call's JSON, named_tool_call_parser.h for those that write it in the markup.
//
// Common to both: the output does not depend on how the stream is split; a call whose markup was committed
// and then turns out malformed makes failed() true (the text after the fault is content); output that ends
// inside a call (max_tokens) drops that call and keeps the complete ones (truncated()). Memory is bounded by
// the output's length.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_format.h"

namespace ferry::server {

struct ToolCallDelta {
  size_t index = 0;
  std::string id;         // set on a call's first delta only
  std::string name;       // likewise
  std::string arguments;  // a fragment ("" on the first delta)
};

struct ParsedText {
  std::string content;
  std::vector<ToolCallDelta> calls;
};

struct ToolCall {
  std::string id, name, arguments;  // arguments: JSON text of an object
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;

  virtual ParsedText feed(std::string_view text) = 0;
  virtual ParsedText finish() = 0;  // the end of the output: held-back text and a call left open are settled

  const std::vector<ToolCall>& calls() const { return calls_; }  // the complete calls so far
  bool failed() const { return failed_; }          // a call was malformed
  bool truncated() const { return truncated_; }    // the output ended inside a call (dropped; the others stay)

 protected:
  // id_seed: call ids are drawn from it ("call_" + 24 alphanumerics; Mistral: 9, as its template requires).
  ToolCallParser(ToolCallFormat format, uint64_t id_seed) : format_(format), rng_(id_seed) {}
  std::string new_id();

  ToolCallFormat format_;
  std::vector<ToolCall> calls_;
  bool failed_ = false;
  bool truncated_ = false;

 private:
  std::mt19937_64 rng_;
};

std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolCallFormat format, uint64_t id_seed);

// The length of the longest suffix of s that is a proper prefix of marker (text that may begin it).
size_t partial_suffix(std::string_view s, std::string_view marker);

}  // namespace ferry::server
