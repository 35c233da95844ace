#include "grammar_test_util.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "fixtures/test_paths.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

namespace ferry::grammar::testing {

std::shared_ptr<const TokenVocab> real_vocab(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const TokenVocab>> cache;
  std::lock_guard lock(mu);
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  const auto dir = ferry::test::shared_testdata();
  if (!dir) return nullptr;
  const GgufFile gguf = GgufFile::open(*dir + "/vocab/ggml-vocab-" + name + ".gguf");
  const Tokenizer tok(vocab_from_gguf(gguf));
  std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
  std::vector<int32_t> stops;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_eog(id)) stops.push_back(id);
    if (!tok.is_control(id) && !tok.is_eog(id)) bytes[static_cast<size_t>(id)] = tok.token_to_piece(id);
  }
  auto v = std::make_shared<const TokenVocab>(std::move(bytes), std::move(stops));
  cache[name] = v;
  return v;
}

std::shared_ptr<const TokenVocab> small_vocab() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"{\"", "\":", "\",", "\"}", "}}", "]}", "[{", "true", "tr", "ue,", "null", "12", "3.",
                        ".5", "e+", "-0", "\n", "  ", " \"", "ab", "abc", "name", "\":\"", "\\n", "\\u00", "é",
                        "\xC3", "\xA9\"", "\xE4\xBD", "\xA0", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80", "a\"", "\"a",
                        "2026", "-12-", "T1", "0:0", "Z\"", "@x", ".com", "}", "{}", "[]", "[1,", "2]"}) {
    t.push_back(s);
  }
  t.push_back("");  // a control token: never allowed
  t.push_back("<eos>");
  const auto eos = static_cast<int32_t>(t.size()) - 1;
  return std::make_shared<const TokenVocab>(std::move(t), std::vector<int32_t>{eos});
}

bool accepts(const std::shared_ptr<CompiledGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.is_complete();
}

std::vector<uint64_t> brute_force_mask(const std::shared_ptr<CompiledGrammar>& g, const std::string& prefix) {
  const TokenVocab& vocab = g->vocab();
  std::vector<uint64_t> mask(vocab.mask_words(), 0);
  GrammarMatcher base(g);
  if (!base.accept_bytes(prefix)) return mask;
  const auto& stops = vocab.stop_ids();
  for (size_t id = 0; id < vocab.size(); ++id) {
    const bool stop = std::find(stops.begin(), stops.end(), static_cast<int32_t>(id)) != stops.end();
    const std::string& bytes = vocab.bytes(static_cast<int32_t>(id));
    const bool ok = stop ? base.is_complete() : !bytes.empty() && base.can_take(bytes);
    if (ok) mask[id >> 6] |= uint64_t{1} << (id & 63);
  }
  return mask;
}

size_t count_bits(const std::vector<uint64_t>& mask) {
  size_t n = 0;
  for (uint64_t w : mask) n += static_cast<size_t>(__builtin_popcountll(w));
  return n;
}

}  // namespace ferry::grammar::testing
