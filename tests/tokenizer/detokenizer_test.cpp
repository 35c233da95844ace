// IncrementalDetokenizer: streaming the ids of text whose multi-byte characters are split across tokens
// gives chunks that never end inside a UTF-8 sequence and concatenate to decode().
#include <gtest/gtest.h>

#include "formats/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace ferry {
namespace {

void expect_streams_cleanly(const Tokenizer& tok, const std::vector<int32_t>& ids, bool* saw_split) {
  IncrementalDetokenizer detok(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string chunk = detok.push(id);
    EXPECT_TRUE(is_valid_utf8(chunk)) << "chunk is not whole UTF-8";
    if (chunk.empty() && !tok.token_to_piece(id).empty()) *saw_split = true;
    streamed += chunk;
  }
  streamed += detok.flush();
  EXPECT_EQ(streamed, tok.decode(ids));
}

TEST(IncrementalDetokenizer, SmolLM2MultiByteSplitAcrossTokens) {
  const auto path = test::default_model();
  if (!path) GTEST_SKIP() << "default model is absent";
  const Tokenizer tok(vocab_from_gguf(GgufFile::open(*path)));
  bool saw_split = false;
  for (const char* text : {"👨‍👩‍👧‍👦 family", "日本語のテキストです。", "🧑🏾‍💻 coding 🎉", "한국어 문장", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
                           "ภาษาไทยไม่มีช่องว่าง", "mixed ascii 🚀 and 中文 <|im_end|>"}) {
    const auto ids = tok.encode(text, false, true);
    expect_streams_cleanly(tok, ids, &saw_split);
  }
  for (const auto& c : test::read_smollm2_golden()) expect_streams_cleanly(tok, c.ids, &saw_split);
  EXPECT_TRUE(saw_split) << "no token ended inside a character: the test exercised nothing";
}

// A byte-level vocab of single bytes only: every multi-byte character is split across tokens.
Tokenizer bytes_only_tokenizer() {
  Vocab v;
  v.kind = TokenizerKind::BytePairGpt2;
  v.pre = "gpt-2";
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8_append(s, byte_to_codepoint(static_cast<uint8_t>(b)));
    v.tokens.push_back(s);
  }
  v.merges.emplace_back("a", "b");  // a merge whose result is missing is ignored
  return Tokenizer(std::move(v));
}

TEST(IncrementalDetokenizer, EveryByteItsOwnToken) {
  const Tokenizer tok = bytes_only_tokenizer();
  const std::string text = "é 中 😀 👍🏽 a";
  const auto ids = tok.encode(text, false, false);
  EXPECT_EQ(ids.size(), text.size());
  IncrementalDetokenizer detok(tok);
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(detok.push(id));
  EXPECT_EQ(detok.flush(), "");
  std::string joined;
  for (const auto& c : chunks) joined += c;
  EXPECT_EQ(joined, text);
  EXPECT_EQ(chunks[0], "");     // first byte of é
  EXPECT_EQ(chunks[1], "\xC3\xA9");
}

TEST(IncrementalDetokenizer, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer tok = bytes_only_tokenizer();
  IncrementalDetokenizer detok(tok);
  // byte b's token id is b in this vocab
  EXPECT_EQ(detok.push(0xE4), "");           // lead byte of a 3-byte sequence
  EXPECT_EQ(detok.push('x'), "\xEF\xBF\xBDx");  // broken: U+FFFD, then the x
  EXPECT_EQ(detok.push(0xF0), "");
  EXPECT_EQ(detok.push(0x9F), "");
  EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD\xEF\xBF\xBD");  // truncated at the end
  EXPECT_EQ(detok.push(0x80), "\xEF\xBF\xBD");  // stray continuation byte
}

}  // namespace
}  // namespace ferry
