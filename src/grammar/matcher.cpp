#include "grammar/matcher.h"

#include <algorithm>

#include "core/check.h"

namespace ferry::grammar {

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocab> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  FERRY_CHECK(vocab_ != nullptr, "grammar: no vocabulary");
  cache_ = std::make_unique<MaskCache>(grammar_, *vocab_);
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<CompiledGrammar> compiled)
    : compiled_(std::move(compiled)), pool_(compiled_->grammar()) {
  stacks_ = pool_.initial();
}

bool GrammarMatcher::is_complete() const {
  return !terminated_ && !stacks_.empty() && stacks_[0] == StackPool::kAccept;
}

bool GrammarMatcher::must_stop() const { return is_complete() && stacks_.size() == 1; }

bool GrammarMatcher::check_token(int32_t stack, const std::string& bytes) {
  a_.assign(1, stack);
  for (char c : bytes) {
    pool_.advance_set(a_, static_cast<uint8_t>(c), b_);
    if (b_.empty()) return false;
    a_.swap(b_);
  }
  return true;
}

void GrammarMatcher::fill_mask(std::span<uint64_t> mask) {
  const TokenVocab& vocab = compiled_->vocab();
  FERRY_CHECK(mask.size() == vocab.mask_words(), "grammar: mask of {} words, vocabulary needs {}", mask.size(),
              vocab.mask_words());
  std::fill(mask.begin(), mask.end(), 0);
  if (terminated_) return;
  const std::vector<int32_t> stacks = stacks_;  // check_token reuses the scratch sets
  for (int32_t s : stacks) {
    if (s == StackPool::kAccept) {
      for (int32_t id : vocab.stop_ids()) mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
      continue;
    }
    key_.clear();
    int32_t n = s;
    for (; n != StackPool::kAccept && key_.size() < kKeyDepth; n = pool_.parent(n)) key_.push_back(pool_.pos(n));
    const MaskEntry& entry = compiled_->cache().get(key_, n != StackPool::kAccept);
    for (size_t w = 0; w < mask.size(); ++w) mask[w] |= entry.accepted[w];
    for (int32_t id : entry.dependent) {
      uint64_t& word = mask[static_cast<size_t>(id) >> 6];
      const uint64_t bit = uint64_t{1} << (id & 63);
      if (!(word & bit) && check_token(s, vocab.bytes(id))) word |= bit;
    }
  }
}

bool GrammarMatcher::can_take(std::string_view bytes) {
  if (terminated_) return false;
  a_ = stacks_;
  for (char c : bytes) {
    pool_.advance_set(a_, static_cast<uint8_t>(c), b_);
    if (b_.empty()) return false;
    a_.swap(b_);
  }
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (!can_take(bytes)) return false;
  stacks_ = a_;
  return true;
}

bool GrammarMatcher::accept_token(int32_t id) {
  const TokenVocab& vocab = compiled_->vocab();
  if (terminated_ || id < 0 || static_cast<size_t>(id) >= vocab.size()) return false;
  const auto& stops = vocab.stop_ids();
  if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
    if (!is_complete()) return false;
    terminated_ = true;
    return true;
  }
  const std::string& bytes = vocab.bytes(id);
  return !bytes.empty() && accept_bytes(bytes);
}

}  // namespace ferry::grammar
