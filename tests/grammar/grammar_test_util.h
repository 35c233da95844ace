// Shared helpers of the grammar tests: real vocabularies from ../shared/testdata, brute-force masks,
// full-string matching.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_vocab.h"

namespace ferry::grammar::testing {

// The vocabulary of ../shared/testdata/vocab/ggml-vocab-NAME.gguf (control tokens empty, EOS the stop
// token); nullopt when the test data is absent. Cached per name.
std::shared_ptr<const TokenVocab> real_vocab(const std::string& name);
// A small synthetic vocabulary: every byte, some multi-byte tokens that span terminals and split UTF-8.
std::shared_ptr<const TokenVocab> small_vocab();

// Does the grammar accept the whole string?
bool accepts(const std::shared_ptr<CompiledGrammar>& g, const std::string& text);
// The mask computed by brute force: token t allowed when the matcher can take its bytes (stop tokens when
// complete), each checked on a fresh copy of the state reached by feeding prefix.
std::vector<uint64_t> brute_force_mask(const std::shared_ptr<CompiledGrammar>& g, const std::string& prefix);
// The number of set bits.
size_t count_bits(const std::vector<uint64_t>& mask);

}  // namespace ferry::grammar::testing
