#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace ferry {
namespace {

TEST(Utf8, Validity) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("ascii"));
  EXPECT_TRUE(is_valid_utf8("é中😀\xF4\x8F\xBF\xBF"));  // up to U+10FFFF
  EXPECT_TRUE(is_valid_utf8(std::string_view("a\0b", 3)));
  EXPECT_FALSE(is_valid_utf8("\x80"));               // stray continuation
  EXPECT_FALSE(is_valid_utf8("\xC3"));               // truncated
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));           // overlong
  EXPECT_FALSE(is_valid_utf8("\xE0\x80\xAF"));       // overlong 3-byte
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));       // surrogate U+D800
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));   // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xFF"));
  EXPECT_FALSE(is_valid_utf8("ok\xE4\xB8"));         // truncated at the end
}

TEST(Utf8, SanitizeAndCompletePrefix) {
  EXPECT_EQ(utf8_sanitize("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(utf8_sanitize("\xE4\xB8"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_complete_prefix("ab\xE4\xB8"), 2u);        // incomplete 中 held back
  EXPECT_EQ(utf8_complete_prefix("ab\xE4\xB8\xAD"), 5u);
  EXPECT_EQ(utf8_complete_prefix("\xFF" "a"), 2u);          // invalid bytes never wait
  EXPECT_EQ(utf8_complete_prefix("\xE4" "a"), 2u);          // broken sequence: emitted
}

TEST(ByteLevel, MapIsABijectionOverBytes) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string mapped = byte_level_encode(all);
  EXPECT_TRUE(is_valid_utf8(mapped));
  EXPECT_EQ(byte_level_decode(mapped), all);
  EXPECT_EQ(byte_level_encode(" "), "\xC4\xA0");   // Ġ
  EXPECT_EQ(byte_level_encode("\n"), "\xC4\x8A");  // Ċ
  EXPECT_EQ(byte_level_encode("A"), "A");
  for (int b = 0; b < 256; ++b) EXPECT_EQ(byte_from_codepoint(byte_to_codepoint(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(byte_from_codepoint(0x4E2D), -1);
}

}  // namespace
}  // namespace ferry
