// grammar_bench: mask time per token per sequence, one core. For each vocabulary (a GGUF with tokenizer
// metadata: a vocab-only file or a model), every schema of the corpus (JSONL) is compiled through a
// GrammarCache and walked (seeded random choices among the allowed tokens) pass times; each fill_mask is
// timed. Pass 1 meets cold mask caches (entries computed on first use), later passes reuse the cached
// grammar, as repeated requests with the same schema do.
//   grammar_bench --vocab A.gguf --vocab B.gguf --corpus tests/grammar/data/schema_corpus.jsonl
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "grammar/grammar_cache.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace ferry;
using namespace ferry::grammar;
using Clock = std::chrono::steady_clock;

std::shared_ptr<const TokenVocab> load_vocab(const std::string& path) {
  const GgufFile gguf = GgufFile::open(path);
  const Tokenizer tok(vocab_from_gguf(gguf));
  std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
  std::vector<int32_t> stops;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_eog(id)) stops.push_back(id);
    if (!tok.is_control(id) && !tok.is_eog(id)) bytes[static_cast<size_t>(id)] = tok.token_to_piece(id);
  }
  return std::make_shared<const TokenVocab>(std::move(bytes), std::move(stops));
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// One walk; appends each fill_mask time (µs) to times.
void walk(const std::shared_ptr<CompiledGrammar>& g, std::mt19937& rng, int max_tokens, std::vector<double>& times) {
  GrammarMatcher m(g);
  const TokenVocab& v = g->vocab();
  std::vector<uint64_t> mask(v.mask_words());
  std::vector<int32_t> allowed, closing;
  for (int step = 0; step < max_tokens; ++step) {
    const auto t0 = Clock::now();
    m.fill_mask(mask);
    times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    allowed.clear();
    closing.clear();
    for (size_t w = 0; w < mask.size(); ++w) {
      for (uint64_t bits = mask[w]; bits; bits &= bits - 1) {
        const auto id = static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
        allowed.push_back(id);
        const std::string& b = v.bytes(id);
        if (m.is_complete() ? b.empty() : (b.size() <= 2 && b.find_first_of("\"]}0") != std::string::npos)) {
          closing.push_back(id);
        }
      }
    }
    if (allowed.empty()) return;
    const auto& from = (step > 30 && !closing.empty() && rng() % 4 != 0) ? closing : allowed;
    m.accept_token(from[rng() % from.size()]);
    if (m.is_terminated()) return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"grammar_bench: constrained-decoding mask time per token"};
  std::vector<std::string> vocabs;
  std::string corpus = "tests/grammar/data/schema_corpus.jsonl";
  int passes = 2, max_tokens = 200;
  app.add_option("--vocab", vocabs, "GGUF files with tokenizer metadata")->required();
  app.add_option("--corpus", corpus, "JSONL of schemas");
  app.add_option("--passes", passes, "walks per schema (pass 1: cold mask caches)");
  app.add_option("--max-tokens", max_tokens, "tokens per walk at most");
  CLI11_PARSE(app, argc, argv);
  std::vector<std::string> schemas;
  {
    std::ifstream in(corpus);
    for (std::string line; std::getline(in, line);) if (!line.empty()) schemas.push_back(line);
  }
  if (schemas.empty()) {
    std::fprintf(stderr, "no schemas in %s\n", corpus.c_str());
    return 1;
  }
  std::printf("| vocabulary | tokens | pass | masks | median µs | p90 µs | p99 µs | max µs | compile ms (median) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& path : vocabs) {
    const auto vocab = load_vocab(path);
    GrammarCache cache(vocab, schemas.size());
    std::mt19937 rng(29);
    for (int pass = 1; pass <= passes; ++pass) {
      std::vector<double> times, compile_ms;
      for (const auto& s : schemas) {
        const auto t0 = Clock::now();
        const auto g = cache.get(ConstraintKind::JsonSchema, s);
        compile_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        walk(g, rng, max_tokens, times);
      }
      const std::string name = path.substr(path.rfind('/') + 1);
      std::printf("| %s | %zu | %d | %zu | %.1f | %.1f | %.1f | %.0f | %.2f |\n", name.c_str(), vocab->size(), pass,
                  times.size(), percentile(times, 0.5), percentile(times, 0.9), percentile(times, 0.99),
                  percentile(times, 1.0), percentile(compile_ms, 0.5));
      std::fflush(stdout);
    }
  }
  return 0;
}
