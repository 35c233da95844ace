// Constrained decoding: a CompiledGrammar (grammar + vocabulary + mask cache, shared by every sequence that
// uses the same constraint) and a GrammarMatcher per sequence that yields the allowed-token mask and
// advances on the chosen token.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/mask_cache.h"
#include "grammar/stack_pool.h"
#include "grammar/token_vocab.h"

namespace ferry::grammar {

class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocab> vocab);
  const Grammar& grammar() const { return grammar_; }
  const TokenVocab& vocab() const { return *vocab_; }
  MaskCache& cache() { return *cache_; }

 private:
  Grammar grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::unique_ptr<MaskCache> cache_;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<CompiledGrammar> compiled);

  // mask: (vocab.mask_words(),) bit t set when token t keeps the output a viable prefix (stop tokens: when
  // the grammar is complete). Empty mask only after termination.
  void fill_mask(std::span<uint64_t> mask);
  // Advances on the token; false (state unchanged) when the grammar does not allow it. A stop token is
  // accepted when the grammar is complete and terminates the matcher.
  bool accept_token(int32_t id);
  // Advances on raw bytes (tests, forced text); false (state unchanged) when they leave the grammar.
  bool accept_bytes(std::string_view bytes);
  // The bytes would keep the output a viable prefix (state unchanged): the plain simulation, no cache.
  bool can_take(std::string_view bytes);
  // The output so far is a complete sentence of the grammar (a stop token would be allowed).
  bool is_complete() const;
  bool is_terminated() const { return terminated_; }
  const TokenVocab& vocab() const { return compiled_->vocab(); }
  // The output can only end here: complete, and no byte continues it.
  bool must_stop() const;

 private:
  bool check_token(int32_t stack, const std::string& bytes);

  std::shared_ptr<CompiledGrammar> compiled_;
  StackPool pool_;
  std::vector<int32_t> stacks_;  // sorted ids in pool_
  bool terminated_ = false;
  std::vector<int32_t> a_, b_;   // scratch sets
  std::vector<uint32_t> key_;
};

}  // namespace ferry::grammar
