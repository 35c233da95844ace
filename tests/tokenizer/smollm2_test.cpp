// SmolLM2 (the default model's GGUF vocab) against Hugging Face `tokenizers` on the golden corpus written by
// reference/make_tokenizer_golden.py, the same through vocab_from_hf on the saved tokenizer.json, round
// trips, and speed.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "fixtures/sanitizer.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace ferry {
namespace {

std::optional<Tokenizer> smollm2_from_gguf() {
  const auto path = test::default_model();
  if (!path) return std::nullopt;
  return Tokenizer(vocab_from_gguf(GgufFile::open(*path)));
}

TEST(SmolLM2, CorpusIsLargeAndVaried) {
  const auto cases = test::read_smollm2_golden();
  EXPECT_GE(cases.size(), 300u);
  size_t with_special = 0;
  for (const auto& c : cases) with_special += c.ids != c.ids_plain;
  EXPECT_GT(with_special, 10u);  // the corpus exercises special-token parsing
}

TEST(SmolLM2, MatchesHuggingFaceTokenForToken) {
  const auto tok = smollm2_from_gguf();
  if (!tok) GTEST_SKIP() << "default model is absent";
  const auto cases = test::read_smollm2_golden();
  int passed = 0;
  for (const auto& c : cases) {
    const auto ids = tok->encode(c.text, /*add_special=*/false, /*parse_special=*/true);
    EXPECT_EQ(ids, c.ids) << "text: '" << c.text << "'";
    const auto plain = tok->encode(c.text, false, false);
    EXPECT_EQ(plain, c.ids_plain) << "text (special as plain): '" << c.text << "'";
    passed += ids == c.ids && plain == c.ids_plain;
  }
  std::printf("[ smollm2 ] %d/%zu strings agree\n", passed, cases.size());
}

TEST(SmolLM2, DecodeRoundTrips) {
  const auto tok = smollm2_from_gguf();
  if (!tok) GTEST_SKIP() << "default model is absent";
  for (const auto& c : test::read_smollm2_golden()) {
    EXPECT_EQ(tok->decode(tok->encode(c.text, false, true)), c.text);
    EXPECT_EQ(tok->decode(tok->encode(c.text, false, false)), c.text);
  }
}

TEST(SmolLM2, SpecialTokensAndMetadata) {
  const auto tok = smollm2_from_gguf();
  if (!tok) GTEST_SKIP() << "default model is absent";
  const Vocab& v = tok->vocab();
  EXPECT_EQ(v.kind, TokenizerKind::BytePairGpt2);
  EXPECT_EQ(v.pre, "smollm");
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(v.tokens[1], "<|im_start|>");
  EXPECT_TRUE(tok->is_eog(2));   // <|im_end|>, the eos
  EXPECT_TRUE(tok->is_eog(0));   // <|endoftext|>
  EXPECT_FALSE(tok->is_eog(1));  // <|im_start|>
  EXPECT_FALSE(tok->is_eog(tok->encode("Hello", false, false).at(0)));
  const auto ids = tok->encode("<|im_start|>user\nHi<|im_end|>", false, true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(tok->decode(ids, /*skip_special=*/true), "user\nHi");
  EXPECT_EQ(tok->token_to_piece(1), "<|im_start|>");
  EXPECT_THROW(tok->token_to_piece(49152), Error);
  EXPECT_THROW(tok->token_to_piece(-1), Error);
  EXPECT_TRUE(v.chat_template.has_value());
  // BOS only when the metadata says so (SmolLM2: add_bos_token = false).
  EXPECT_EQ(tok->encode("Hi", true, false), tok->encode("Hi", false, false));
}

TEST(SmolLM2, EncodingTheCorpusTakesMilliseconds) {
  const auto tok = smollm2_from_gguf();
  if (!tok) GTEST_SKIP() << "default model is absent";
  const auto cases = test::read_smollm2_golden();
  size_t n_tokens = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& c : cases) n_tokens += tok->encode(c.text, false, true).size();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ smollm2 ] encoded %zu strings (%zu tokens) in %.2f ms\n", cases.size(), n_tokens, ms);
  // A bound for a pathological (quadratic) encoder, not a benchmark: a release build takes a few ms, the Debug
  // build under AddressSanitizer ~53 ms on an idle 2-core machine, and CI runs tests in parallel.
  EXPECT_LT(ms, test::kAddressSanitizer ? 2500.0 : 250.0);
}

TEST(SmolLM2, HfTokenizerJsonGivesTheSameIds) {
  const auto tok = smollm2_from_gguf();
  if (!tok) GTEST_SKIP() << "default model is absent";
  namespace fs = std::filesystem;
  const fs::path dir = test::temp_path("smollm2_hf");
  fs::create_directories(dir);
  fs::copy_file(test::golden_dir() + "/tokenizer/smollm2-tokenizer.json", dir / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  {
    std::ofstream cfg(dir / "tokenizer_config.json");
    cfg << R"({"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"}, "add_bos_token": false,
              "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"})";
  }
  const Tokenizer hf(vocab_from_hf(dir.string()));
  EXPECT_EQ(hf.vocab_size(), tok->vocab_size());
  EXPECT_EQ(hf.vocab().bos_id, 1);
  EXPECT_EQ(hf.vocab().eos_id, 2);
  EXPECT_EQ(hf.vocab().chat_template, "{% for m in messages %}{{ m.content }}{% endfor %}");
  EXPECT_EQ(hf.vocab().token_types, tok->vocab().token_types);
  for (const auto& c : test::read_smollm2_golden()) {
    EXPECT_EQ(hf.encode(c.text, false, true), c.ids) << "text: '" << c.text << "'";
    EXPECT_EQ(hf.encode(c.text, false, false), c.ids_plain) << "text: '" << c.text << "'";
  }
}

}  // namespace
}  // namespace ferry
