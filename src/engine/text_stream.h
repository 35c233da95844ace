// A request's generated text as it streams: incremental detokenization (whole UTF-8 characters only) and stop
// strings. Text that could be the start of a stop string is held back until the next tokens decide it; when a
// stop string completes, the text before it is released and the stream ends (the stop string is excluded).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ferry {

class TextStream {
 public:
  // Special (control) tokens produce no text (OpenAI servers skip them).
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop);

  // The text that may be released after `token`. Sets stopped() when a stop string completed.
  std::string push(int32_t token);
  // Everything still held back (the stream ends: max_tokens, end of generation, context full). A stop string
  // completed by the flushed bytes is honored.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::string release();  // moves the releasable part of held_ out (see the header comment)

  IncrementalDetokenizer detok_;
  std::vector<std::string> stop_;
  std::string held_;  // decoded but not yet released
  bool stopped_ = false;
};

}  // namespace ferry
