// Compiled grammars cached by constraint: the same schema (or regex, or GBNF text) against the same
// vocabulary gives the same CompiledGrammar, so its token-mask cache warms once and serves every request
// that sends it. Least-recently-used entries beyond the capacity are dropped (matchers holding one keep it).
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "grammar/matcher.h"

namespace ferry::grammar {

enum class ConstraintKind { JsonObject, JsonSchema, Regex, Gbnf };

class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const TokenVocab> vocab, size_t capacity);

  // The compiled grammar of the constraint (text: the schema JSON, the regex or the GBNF; unused for
  // JsonObject). Throws ferry::Error naming the problem for a bad or unsupported constraint. Thread-safe.
  std::shared_ptr<CompiledGrammar> get(ConstraintKind kind, std::string_view text);
  size_t size() const;
  size_t hits() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<CompiledGrammar>>;
  std::shared_ptr<const TokenVocab> vocab_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t hits_ = 0;
};

}  // namespace ferry::grammar
