#include "engine/text_stream.h"

#include <algorithm>

namespace ferry {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop)
    : detok_(tokenizer, /*skip_special=*/true), stop_(std::move(stop)) {}

std::string TextStream::push(int32_t token) {
  if (stopped_) return {};
  held_ += detok_.push(token);
  return release();
}

std::string TextStream::finish() {
  if (stopped_) return {};
  held_ += detok_.flush();
  std::string out = release();
  if (!stopped_) {
    out += held_;
    held_.clear();
  }
  return out;
}

std::string TextStream::release() {
  // The earliest complete stop string ends the stream.
  size_t first = std::string::npos;
  for (const std::string& s : stop_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    std::string out = held_.substr(0, first);
    held_.clear();
    stopped_ = true;
    return out;
  }
  // Hold back the longest suffix of held_ that is a proper prefix of some stop string. A stop string starts
  // with a whole UTF-8 character, so the cut never splits one.
  size_t keep = 0;
  for (const std::string& s : stop_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

}  // namespace ferry
