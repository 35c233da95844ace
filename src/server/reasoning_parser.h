// Splits generated text into reasoning and content for models that think in <think>...</think> (Qwen3,
// QwQ, DeepSeek-R1 and its distills), as vLLM's reasoning parsers do: the reasoning is the text inside the
// block, the content what follows </think> (blank lines right after it dropped). The block opens either in
// the output (a leading "<think>") or already in the prompt (templates whose generation prompt ends with
// "<think>\n": DeepSeek-R1): then the output is reasoning until "</think>". Output that ends inside the block
// is all reasoning. Text that may be the start of a tag is held back until decided.
#pragma once

#include <string>
#include <string_view>

namespace ferry::server {

struct ReasoningSplit {
  std::string reasoning, content;
};

// Whether the template's output may carry a <think> block (its source mentions the tags).
bool template_thinks(std::string_view template_source);
// Whether the rendered prompt leaves a <think> block open (its text ends with "<think>" and blanks).
bool prompt_opens_reasoning(std::string_view prompt_text);
// Whether it ends with a closed block ("</think>" and blanks: Qwen3's enable_thinking false writes an empty one).
bool prompt_closes_reasoning(std::string_view prompt_text);
// The block's tags.
inline constexpr std::string_view kReasoningOpen = "<think>";
inline constexpr std::string_view kReasoningClose = "</think>";

class ReasoningParser {
 public:
  explicit ReasoningParser(bool starts_in_reasoning);
  ReasoningSplit feed(std::string_view text);
  ReasoningSplit finish();

 private:
  enum class State { Start, Reasoning, AfterClose, Content };
  std::string pending_;
  State state_;
};

}  // namespace ferry::server
