// Corrupt vocabularies (GGUF metadata, tokenizer.json) give a clear ferry::Error, never a crash; the loaders
// read what they should.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "fixtures/test_paths.h"

namespace ferry {
namespace {

// A tiny valid SPM vocab in GGUF form; `edit` corrupts it before parsing.
Vocab load(const std::function<void(GgufWriter&)>& edit) {
  GgufWriter w;
  w.set("tokenizer.ggml.model", GgufValue::str("llama"));
  w.set("tokenizer.ggml.tokens", GgufValue::strings({"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b",
                                                     "\xE2\x96\x81" "a", "ab"}));
  w.set("tokenizer.ggml.scores", GgufValue::f32s({0, 0, 0, -1, -2, -3, -0.5f, -0.25f}));
  w.set("tokenizer.ggml.token_type", GgufValue::i32s({2, 3, 3, 1, 1, 1, 1, 1}));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(2));
  w.set("tokenizer.ggml.unknown_token_id", GgufValue::u32(0));
  edit(w);
  const std::vector<uint8_t> bytes = w.to_bytes();
  return vocab_from_gguf(GgufFile::parse(bytes.data(), bytes.size()));
}

std::string error_of(const std::function<void(GgufWriter&)>& edit) {
  try {
    load(edit);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(VocabFromGguf, ReadsAValidVocab) {
  const Vocab v = load([](GgufWriter&) {});
  EXPECT_EQ(v.kind, TokenizerKind::SentencePiece);
  EXPECT_EQ(v.tokens.size(), 8u);
  EXPECT_TRUE(v.add_bos);           // SPM default
  EXPECT_TRUE(v.add_space_prefix);  // SPM default
  const Tokenizer tok(v);
  // The higher score merges first: "ab" (-0.25) before "▁a" (-0.5), giving ▁ + ab.
  EXPECT_EQ(tok.encode("ab", true, false), (std::vector<int32_t>{1, 3, 7}));
  EXPECT_EQ(tok.encode("a", false, false), (std::vector<int32_t>{6}));
  EXPECT_EQ(tok.decode(tok.encode("a ab", true, false), true), "a ab");
  // no byte tokens: a character outside the vocab becomes <unk>
  EXPECT_EQ(tok.encode("c", false, false), (std::vector<int32_t>{3, 0}));
}

TEST(VocabFromGguf, RejectsCorruptMetadata) {
  EXPECT_NE(error_of([](GgufWriter& w) { w.set("tokenizer.ggml.model", GgufValue::str("bert")); })
                .find("unsupported tokenizer model"), std::string::npos);
  EXPECT_NE(error_of([](GgufWriter& w) { w.set("tokenizer.ggml.model", GgufValue::u32(3)); }).find("string"),
            std::string::npos);
  EXPECT_NE(error_of([](GgufWriter& w) { w.set("tokenizer.ggml.scores", GgufValue::f32s({0, 1})); })
                .find("2 entries for 8 tokens"), std::string::npos);
  EXPECT_NE(error_of([](GgufWriter& w) { w.set("tokenizer.ggml.token_type", GgufValue::i32s({1, 1, 1})); })
                .find("token_type"), std::string::npos);
  EXPECT_NE(error_of([](GgufWriter& w) {
              w.set("tokenizer.ggml.token_type", GgufValue::i32s({1, 1, 1, 1, 1, 1, 1, 9}));
            }).find("not a token type"), std::string::npos);
  EXPECT_NE(error_of([](GgufWriter& w) { w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(8)); })
                .find("out of range"), std::string::npos);
  EXPECT_NE(error_of([](GgufWriter& w) { w.set("tokenizer.ggml.bos_token_id", GgufValue::str("1")); })
                .find("integer"), std::string::npos);
  EXPECT_NE(error_of([](GgufWriter& w) { w.set("tokenizer.ggml.tokens", GgufValue::i32s({1, 2})); })
                .find("array of string"), std::string::npos);
  EXPECT_NE(error_of([](GgufWriter& w) { w.set("tokenizer.ggml.tokens", GgufValue::str("a")); })
                .find("expected an array"), std::string::npos);
  EXPECT_NE(error_of([](GgufWriter& w) {
              w.set("tokenizer.ggml.scores", GgufValue::f32s({0, 0, 0, 0, 0, 0, 0, std::nanf("")}));
            }).find("not finite"), std::string::npos);
  EXPECT_NE(error_of([](GgufWriter& w) { w.set("tokenizer.ggml.add_bos_token", GgufValue::u32(1)); })
                .find("bool"), std::string::npos);
  // byte-level BPE needs merges, well-formed, and a known pre-tokenizer
  const auto gpt2 = [](GgufWriter& w) { w.set("tokenizer.ggml.model", GgufValue::str("gpt2")); };
  EXPECT_NE(error_of(gpt2).find("merges"), std::string::npos);
  EXPECT_NE(error_of([&](GgufWriter& w) {
              gpt2(w);
              w.set("tokenizer.ggml.merges", GgufValue::strings({"ab"}));
            }).find("not two tokens"), std::string::npos);
  try {
    const Vocab v = load([&](GgufWriter& w) {
      gpt2(w);
      w.set("tokenizer.ggml.pre", GgufValue::str("no-such-pre"));
      w.set("tokenizer.ggml.merges", GgufValue::strings({"a b"}));
    });
    EXPECT_THROW(Tokenizer{v}, Error);
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
  }
  EXPECT_NE(error_of([](GgufWriter& w) { w.set("tokenizer.ggml.model", GgufValue::str("llama"));
                                         w.set("tokenizer.ggml.tokens", GgufValue::strings({})); })
                .find("empty"), std::string::npos);
}

TEST(VocabFromGguf, MissingTokenizerIsAClearError) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  const auto bytes = w.to_bytes();
  try {
    vocab_from_gguf(GgufFile::parse(bytes.data(), bytes.size()));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model is missing"), std::string::npos);
  }
}

TEST(Tokenizer, InvalidUtf8InputDoesNotCrash) {
  const Tokenizer tok(load([](GgufWriter&) {}));
  for (std::string_view bad : {std::string_view("\xFF\xFE"), std::string_view("a\xC3"), std::string_view("\xED\xA0\x80")}) {
    EXPECT_FALSE(is_valid_utf8(bad));
    EXPECT_NO_THROW(tok.encode(bad, true, true));
  }
}

void write(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }

std::string hf_error(const std::string& tokenizer_json) {
  const auto dir = std::filesystem::path(test::temp_path("hf_bad"));
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir / "tokenizer_config.json");
  write(dir / "tokenizer.json", tokenizer_json);
  try {
    vocab_from_hf(dir.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(VocabFromHf, ClearErrors) {
  EXPECT_NE(hf_error("{not json").find("invalid JSON"), std::string::npos);
  EXPECT_NE(hf_error(R"({"model": {"type": "Unigram", "vocab": []}})").find("not supported"), std::string::npos);
  EXPECT_NE(hf_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                         "pre_tokenizer": {"type": "BertPreTokenizer"}})").find("BertPreTokenizer"),
            std::string::npos);
  EXPECT_NE(hf_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                         "normalizer": {"type": "Lowercase"}, "pre_tokenizer": {"type": "ByteLevel"}})")
                .find("Lowercase"), std::string::npos);
  EXPECT_NE(hf_error(R"({"model": {"type": "BPE", "vocab": {"a": 99999999}, "merges": []},
                         "pre_tokenizer": {"type": "ByteLevel"}})").find("out of range"), std::string::npos);
  EXPECT_NE(hf_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [3]},
                         "pre_tokenizer": {"type": "ByteLevel"}})").find("merge"), std::string::npos);
  EXPECT_NE(hf_error(R"({"model": {"type": "BPE", "vocab": "x"}})").find("vocab"), std::string::npos);
  EXPECT_NE(hf_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})").find("neither"),
            std::string::npos);
}

TEST(VocabFromHf, SentencePieceStyleTokenizerJson) {
  // Llama-2-style: Prepend/Replace normalizer, BPE with byte_fallback and merges, added special tokens.
  const auto dir = std::filesystem::path(test::temp_path("hf_spm"));
  std::filesystem::create_directories(dir);
  write(dir / "tokenizer.json", R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true},
                     {"id": 2, "content": "</s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0xC3>": 3, "<0xA9>": 4, "▁": 5, "h": 6, "i": 7,
                        "hi": 8, "▁hi": 9},
              "merges": ["h i", "▁ hi"]}})");
  write(dir / "tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true})");
  const Tokenizer tok(vocab_from_hf(dir.string()));
  EXPECT_EQ(tok.vocab().kind, TokenizerKind::SentencePiece);
  EXPECT_EQ(tok.vocab().token_types[3], static_cast<int32_t>(TokenType::Byte));
  EXPECT_EQ(tok.encode("hi é", true, false), (std::vector<int32_t>{1, 9, 5, 3, 4}));
  EXPECT_EQ(tok.decode(tok.encode("hi é", true, false), true), "hi é");
  EXPECT_EQ(tok.encode("<s>hi", false, true), (std::vector<int32_t>{1, 9}));
}

}  // namespace
}  // namespace ferry
