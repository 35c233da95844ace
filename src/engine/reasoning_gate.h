// A constrained request on a reasoning model (OutputFormat::starts_after, e.g. "</think>"): the format's
// matcher waits while the model writes its reasoning, and applies from the byte after the end marker, as
// vLLM's structured output does with a reasoning parser. While the gate is closed the draw is free except:
//   - no end-of-generation token (the answer must still come: only max_tokens ends the request inside the
//     reasoning, with finish_reason length and no answer);
//   - no token that would complete the marker with text after it that the format cannot start with (a
//     vocabulary whose marker is several tokens may merge its last bytes with what follows: ">{" ).
// Blanks right after the marker are not given to the format (templates write "</think>\n\n").
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/matcher.h"

namespace ferry {

class ReasoningGate {
 public:
  // end_marker: 1..64 bytes; matcher: the request's format at its start.
  ReasoningGate(std::string end_marker, std::unique_ptr<grammar::GrammarMatcher> matcher);

  // logits: (vocab_size) f32 of the next draw; the tokens the gate refuses become -inf.
  void restrict(std::span<float> logits);

  // One more generated token's bytes. Once the marker has completed: the format's matcher, advanced over the
  // bytes after the marker (blanks skipped); null while it has not.
  std::unique_ptr<grammar::GrammarMatcher> push(std::string_view piece);

 private:
  // The marker completes in tail_ + bytes, and what follows it is not blanks the format can start with.
  bool refuses(std::string_view bytes);

  std::string marker_;
  std::unique_ptr<grammar::GrammarMatcher> matcher_;
  std::vector<int32_t> marker_tokens_;  // tokens whose bytes hold the whole marker (checked at every draw)
  std::string tail_;                    // the output's longest suffix that is a proper prefix of the marker
};

}  // namespace ferry
