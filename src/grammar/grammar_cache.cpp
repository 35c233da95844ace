#include "grammar/grammar_cache.h"

#include "core/check.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace ferry::grammar {

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocab> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(capacity) {
  FERRY_CHECK(vocab_ != nullptr && capacity_ > 0, "grammar cache: needs a vocabulary and a capacity");
}

std::shared_ptr<CompiledGrammar> GrammarCache::get(ConstraintKind kind, std::string_view text) {
  std::string key(1, static_cast<char>('0' + static_cast<int>(kind)));
  key += text;
  {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
  }
  // Compile outside the lock (a large schema takes a while); a concurrent miss on the same key compiles twice
  // and keeps the first.
  Grammar g = kind == ConstraintKind::JsonObject ? compile_json_object()
              : kind == ConstraintKind::JsonSchema ? compile_json_schema(text)
              : kind == ConstraintKind::Regex      ? compile_regex(text)
                                                   : parse_gbnf(text);
  auto compiled = std::make_shared<CompiledGrammar>(std::move(g), vocab_);
  std::lock_guard lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

size_t GrammarCache::hits() const {
  std::lock_guard lock(mu_);
  return hits_;
}

}  // namespace ferry::grammar
