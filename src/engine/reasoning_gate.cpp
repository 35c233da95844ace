#include "engine/reasoning_gate.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace ferry {
namespace {

constexpr size_t kMaxMarkerBytes = 64;

bool blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The length of the longest suffix of s that is a proper prefix of marker.
size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

// The text after the marker's first occurrence in s, blanks skipped; s must hold the marker.
std::string_view after_marker(std::string_view s, std::string_view marker) {
  std::string_view rest = s.substr(s.find(marker) + marker.size());
  while (!rest.empty() && blank(rest.front())) rest.remove_prefix(1);
  return rest;
}

}  // namespace

ReasoningGate::ReasoningGate(std::string end_marker, std::unique_ptr<grammar::GrammarMatcher> matcher)
    : marker_(std::move(end_marker)), matcher_(std::move(matcher)) {
  FERRY_CHECK(!marker_.empty() && marker_.size() <= kMaxMarkerBytes, "starts_after: must be 1..{} bytes, got {}",
              kMaxMarkerBytes, marker_.size());
  FERRY_CHECK(matcher_ != nullptr, "starts_after: needs an output format");
  const grammar::TokenVocab& vocab = matcher_->vocab();
  for (size_t id = 0; id < vocab.size(); ++id)
    if (vocab.bytes(int32_t(id)).find(marker_) != std::string::npos) marker_tokens_.push_back(int32_t(id));
}

bool ReasoningGate::refuses(std::string_view bytes) {
  const std::string s = tail_ + std::string(bytes);
  if (s.find(marker_) == std::string::npos) return false;
  const std::string_view rest = after_marker(s, marker_);
  return !rest.empty() && !matcher_->can_take(rest);
}

void ReasoningGate::restrict(std::span<float> logits) {
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  const grammar::TokenVocab& vocab = matcher_->vocab();
  for (const int32_t id : vocab.stop_ids())
    if (size_t(id) < logits.size()) logits[size_t(id)] = kOff;
  if (tail_.empty()) {
    for (const int32_t id : marker_tokens_)
      if (size_t(id) < logits.size() && refuses(vocab.bytes(id))) logits[size_t(id)] = kOff;
    return;
  }
  // The output ends with the marker's first bytes: any token may complete it (a vocabulary scan, only here).
  const size_t n = std::min(logits.size(), vocab.size());
  for (size_t id = 0; id < n; ++id)
    if (refuses(vocab.bytes(int32_t(id)))) logits[id] = kOff;
}

std::unique_ptr<grammar::GrammarMatcher> ReasoningGate::push(std::string_view piece) {
  const std::string s = tail_ + std::string(piece);
  if (s.find(marker_) == std::string::npos) {
    tail_ = s.substr(s.size() - partial_suffix(s, marker_));
    return nullptr;
  }
  const std::string_view rest = after_marker(s, marker_);
  FERRY_CHECK(rest.empty() || matcher_->accept_bytes(rest),
              "grammar: the token that ended the reasoning carries text the output format does not allow");
  return std::move(matcher_);
}

}  // namespace ferry
