// GBNF parsing and matching: full strings accepted/rejected, masks equal to brute force, bad text rejected
// with a clear error.
#include <gtest/gtest.h>

#include "core/check.h"
#include "grammar/gbnf.h"
#include "grammar_test_util.h"

namespace ferry::grammar {
namespace {

using testing::accepts;
using testing::brute_force_mask;
using testing::small_vocab;

std::shared_ptr<CompiledGrammar> compile(const std::string& text) {
  return std::make_shared<CompiledGrammar>(parse_gbnf(text), small_vocab());
}

TEST(Gbnf, AcceptsAndRejectsWholeStrings) {
  const auto g = compile(R"(
    root ::= greeting " " name ("!" | "?")?   # a comment
    greeting ::= "hello" | "hi"
    name ::= [A-Z] [a-z]{1,3}
  )");
  EXPECT_TRUE(accepts(g, "hello Bob"));
  EXPECT_TRUE(accepts(g, "hi Anna!"));
  EXPECT_TRUE(accepts(g, "hi Al?"));
  EXPECT_FALSE(accepts(g, "hi A"));       // [a-z]{1,3}: at least one
  EXPECT_FALSE(accepts(g, "hi Annab"));   // at most three
  EXPECT_FALSE(accepts(g, "hey Bob"));
  EXPECT_FALSE(accepts(g, "hello bob"));
  EXPECT_FALSE(accepts(g, "hello Bob!!"));
}

TEST(Gbnf, UnicodeClassesMatchWholeCodepoints) {
  const auto g = compile(R"(root ::= [^a-z"]+ "." | [\u4e00-\u9fff]* "!")");
  EXPECT_TRUE(accepts(g, "\xE4\xBD\xA0\xE5\xA5\xBD!"));   // 你好!
  EXPECT_TRUE(accepts(g, "\xC3\xA9\xF0\x9F\x98\x80."));    // é😀.
  EXPECT_FALSE(accepts(g, "\xC3\xA9" "a."));
  EXPECT_FALSE(accepts(g, "\xC3."));                         // a truncated sequence is not a codepoint
  EXPECT_FALSE(accepts(g, "\xED\xA0\x80."));                 // a surrogate is not UTF-8
  GrammarMatcher m(g);
  EXPECT_TRUE(m.accept_bytes("\xE4\xBD"));  // partial UTF-8 is a viable prefix
  EXPECT_FALSE(m.is_complete());
  EXPECT_TRUE(m.accept_bytes("\xA0!"));
  EXPECT_TRUE(m.is_complete());
}

TEST(Gbnf, RightRecursionAndNesting) {
  const auto g = compile(R"(
    root ::= list
    list ::= "[" (item ("," item)*)? "]"
    item ::= list | [0-9]+
  )");
  EXPECT_TRUE(accepts(g, "[]"));
  EXPECT_TRUE(accepts(g, "[1,[2,[]],[[3]]]"));
  EXPECT_FALSE(accepts(g, "[1,]"));
  EXPECT_FALSE(accepts(g, "[[1]"));
  std::string deep(500, '[');
  deep += std::string(500, ']');
  EXPECT_TRUE(accepts(g, deep));
}

TEST(Gbnf, MasksEqualBruteForce) {
  const auto g = compile(R"(
    root ::= "{" ws "\"" key "\"" ws ":" ws value ws "}"
    key ::= [a-z]+
    value ::= "true" | "null" | number | "\"" [^"\\]* "\"" | "[" ws (value ws ("," ws value ws)*)? "]"
    number ::= "-"? [0-9]+ ("." [0-9]+)? ([eE] [+-]? [0-9]+)?
    ws ::= [ \n]{0,2}
  )");
  for (const std::string prefix : {"", "{", "{\"", "{\"ab", "{\"abc\":", "{\"a\": tr", "{\"a\":\"x", "{\"a\":\"\xC3",
                                    "{\"a\":-1", "{\"a\":12.5e", "{\"a\":[", "{\"a\":[[1, [", "{\"a\":[1]",
                                    "{\"a\":null}"}) {
    GrammarMatcher m(g);
    ASSERT_TRUE(m.accept_bytes(prefix)) << prefix;
    std::vector<uint64_t> mask(g->vocab().mask_words());
    m.fill_mask(mask);
    EXPECT_EQ(mask, brute_force_mask(g, prefix)) << "prefix: " << prefix;
  }
}

TEST(Gbnf, TokensAdvanceTheMatcher) {
  const auto g = compile(R"(root ::= "true" | "null")");
  const auto& v = g->vocab();
  auto id_of = [&](const std::string& s) {
    for (size_t i = 0; i < v.size(); ++i) if (v.bytes(static_cast<int32_t>(i)) == s) return static_cast<int32_t>(i);
    return -1;
  };
  GrammarMatcher m(g);
  const int32_t eos = v.stop_ids()[0];
  EXPECT_FALSE(m.accept_token(eos));
  EXPECT_FALSE(m.accept_token(id_of("ue,")));
  EXPECT_TRUE(m.accept_token(id_of("tr")));
  EXPECT_FALSE(m.accept_token(id_of("ue,")));
  EXPECT_TRUE(m.accept_token(id_of("u")));
  EXPECT_TRUE(m.accept_token(id_of("e")));
  EXPECT_TRUE(m.must_stop());
  EXPECT_TRUE(m.accept_token(eos));
  EXPECT_TRUE(m.is_terminated());
  std::vector<uint64_t> mask(v.mask_words());
  m.fill_mask(mask);
  EXPECT_EQ(testing::count_bits(mask), 0u);
}

TEST(Gbnf, BadTextIsAClearError) {
  auto error_of = [](const std::string& text) -> std::string {
    try {
      parse_gbnf(text);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("root ::= foo").find("'foo' is used but never defined"), std::string::npos);
  EXPECT_NE(error_of("root ::= root \"a\" | \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= x\nx ::= \"\"? root").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("start ::= \"a\"").find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a").find("unterminated"), std::string::npos);
  EXPECT_NE(error_of("root ::= [b-a]").find("out of order"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{99999999}").find("repetition count"), std::string::npos);
  EXPECT_NE(error_of("root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')')).find("nested deeper"),
            std::string::npos);
  std::string huge = "root ::=";
  for (int i = 0; i < 100; ++i) huge += " \"a\"{0,10000}";
  EXPECT_NE(error_of(huge).find("too large"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\" }").find("unexpected"), std::string::npos);
  EXPECT_NE(error_of("").find("empty"), std::string::npos);
}

}  // namespace
}  // namespace ferry::grammar

#include "grammar/grammar_cache.h"

namespace ferry::grammar {
namespace {

TEST(GrammarCache, SameConstraintSameGrammarBoundedSize) {
  GrammarCache cache(testing::small_vocab(), 2);
  const auto a = cache.get(ConstraintKind::JsonSchema, R"({"type":"integer"})");
  EXPECT_EQ(cache.get(ConstraintKind::JsonSchema, R"({"type":"integer"})"), a);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_NE(cache.get(ConstraintKind::Regex, R"({"type":"integer"})"), a);  // the kind is part of the key
  cache.get(ConstraintKind::JsonObject, "");
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.get(ConstraintKind::JsonSchema, R"({"type":"integer"})"), a);  // evicted, compiled again
  EXPECT_THROW(cache.get(ConstraintKind::Gbnf, "root ::= nope"), Error);
}

// Reproduction: a group's generated rule took the name of a rule defined further down the text.
TEST(Gbnf, GeneratedRulesNeverTakeALaterRulesName) {
  EXPECT_NO_THROW(parse_gbnf("root ::= (\"a\")* root-1\nroot-1 ::= \"b\" (\"c\")?\nroot-2 ::= \"d\"\n"));
}

}  // namespace
}  // namespace ferry::grammar
