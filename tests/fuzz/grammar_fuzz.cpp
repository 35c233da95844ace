// Fuzz target for the grammar compilers and the matcher. The first input byte picks the input kind:
//   0: GBNF text, 1: JSON schema, 2: regex; the rest is the text.
// When it compiles, a matcher over a small vocabulary takes the text's bytes one token at a time as far as
// the grammar allows, computing the mask each step. Checks: no crash, errors are ferry::Error, the mask
// agrees with can_take for every token, and an accepted token advances the state.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "core/check.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace {

using namespace ferry::grammar;

std::shared_ptr<const TokenVocab> fuzz_vocab() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"{\"", "\":", "\",", "true", "null", "12", "\xC3\xA9", "\xE4\xBD", "ab", "]}", "  "}) {
    t.push_back(s);
  }
  t.push_back("<eos>");
  const auto eos = static_cast<int32_t>(t.size()) - 1;
  return std::make_shared<const TokenVocab>(std::move(t), std::vector<int32_t>{eos});
}

// Feeds the text's bytes as tokens while the grammar allows them, checking each mask against can_take.
void walk(const std::shared_ptr<CompiledGrammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  const TokenVocab& vocab = g->vocab();
  std::vector<uint64_t> mask(vocab.mask_words());
  for (size_t pos = 0; pos < text.size() && pos < 64; ++pos) {
    m.fill_mask(mask);
    for (size_t id = 0; id < 256; ++id) {
      const bool in_mask = (mask[id >> 6] >> (id & 63)) & 1;
      if (in_mask != m.can_take(vocab.bytes(static_cast<int32_t>(id)))) std::abort();
    }
    const auto id = static_cast<int32_t>(static_cast<uint8_t>(text[pos]));
    if (!((mask[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1)) break;
    if (!m.accept_token(id)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto kVocab = fuzz_vocab();
  if (size == 0 || size > 4096) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::shared_ptr<CompiledGrammar> g;
  try {
    switch (data[0] % 3) {
      case 0: g = std::make_shared<CompiledGrammar>(parse_gbnf(text), kVocab); break;
      case 1: g = std::make_shared<CompiledGrammar>(compile_json_schema(text), kVocab); break;
      default: g = std::make_shared<CompiledGrammar>(compile_regex(text), kVocab); break;
    }
  } catch (const ferry::Error&) {
    return 0;
  }
  try {
    walk(g, text);
  } catch (const ferry::Error&) {  // a bounded-work limit (too ambiguous, too deep): a clear error, no stall
  }
  return 0;
}
