// Unit tests of the Jinja engine: semantics pinned by jinja2 itself (engine_cases of the golden file, rendered
// by transformers' environment), and errors, limits and undefined handling checked directly.
#include <gtest/gtest.h>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "fixtures/test_paths.h"
#include "tokenizer/jinja/template.h"

namespace ferry::jinja {
namespace {

std::tm fixed_clock() {
  std::tm tm{};
  tm.tm_year = 124;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 9;
  tm.tm_min = 30;
  tm.tm_wday = 5;
  return tm;
}

std::string render(const std::string& src, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object(),
                   RenderLimits limits = {}) {
  return Template(src).render(ctx, limits, fixed_clock);
}

std::string error_of(const std::string& src, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object(),
                     RenderLimits limits = {}) {
  try {
    render(src, ctx, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(JinjaEngine, MatchesJinja2OnEngineCases) {
  const auto golden = nlohmann::ordered_json::parse(test::read_file(test::golden_dir() + "/chat_templates.json"));
  ASSERT_FALSE(golden["engine_cases"].empty());
  for (const auto& c : golden["engine_cases"]) {
    const std::string src = c["source"];
    if (c.contains("expected")) {
      std::string got;
      try {
        got = render(src, c["context"]);
      } catch (const Error& e) {
        ADD_FAILURE() << src << "\nthrew: " << e.what();
        continue;
      }
      EXPECT_EQ(got, c["expected"].get<std::string>()) << "template: " << src;
    } else {
      EXPECT_NE(error_of(src, c["context"]), "<no error>") << src;
    }
  }
}

TEST(JinjaEngine, SyntaxErrorsNameLineAndColumn) {
  EXPECT_THAT(error_of("line one\n{% if x %}\n{{ 1 + }}\n{% endif %}"), ::testing::HasSubstr("line 3"));
  EXPECT_THAT(error_of("{% for x in y %}no end"), ::testing::HasSubstr("endfor"));
  EXPECT_THAT(error_of("ok\n\n  {{ 'unterminated }}"), ::testing::HasSubstr("line 3 col 6"));
  EXPECT_THAT(error_of("{% frobnicate %}"), ::testing::HasSubstr("frobnicate"));
  EXPECT_THAT(error_of("{# never closed"), ::testing::HasSubstr("comment"));
  EXPECT_THAT(error_of("{{ x "), ::testing::HasSubstr("unterminated"));
}

TEST(JinjaEngine, RuntimeErrorsNameTheLine) {
  EXPECT_THAT(error_of("a\nb\n{{ 'x' + 1 }}"), ::testing::HasSubstr("line 3"));
  EXPECT_THAT(error_of("{{ missing.attr }}"), ::testing::HasSubstr("'missing' is undefined"));
  EXPECT_THAT(error_of("{{ 1 // 0 }}"), ::testing::HasSubstr("division"));
  EXPECT_THAT(error_of("{{ x | nosuchfilter }}"), ::testing::HasSubstr("nosuchfilter"));
  EXPECT_THAT(error_of("{% set l = [1] %}{{ l.append(2) }}"), ::testing::HasSubstr("undefined"));
}

TEST(JinjaEngine, RaiseExceptionCarriesTheMessage) {
  EXPECT_EQ(error_of("{% if true %}{{ raise_exception('roles must alternate') }}{% endif %}"), "roles must alternate");
}

TEST(JinjaEngine, UndefinedBehavesLikeJinja2) {
  EXPECT_EQ(render("[{{ u }}][{{ u | trim }}][{{ u | length }}][{% for x in u %}x{% endfor %}][{{ 'a' ~ u }}]"),
            "[][][0][][a]");
  EXPECT_EQ(render("{{ d.nokey is defined }}{{ d.nokey }}{{ d['nokey'] is none }}", {{"d", {{"k", 1}}}}), "FalseFalse");
  EXPECT_THAT(error_of("{{ u + 1 }}"), ::testing::HasSubstr("undefined"));
  EXPECT_THAT(error_of("{{ u.x.y }}"), ::testing::HasSubstr("undefined"));
  EXPECT_THAT(error_of("{{ u | tojson }}"), ::testing::HasSubstr("JSON"));
}

TEST(JinjaEngine, WhitespaceControl) {
  // trim_blocks + lstrip_blocks: block lines vanish entirely; '-' eats all surrounding whitespace.
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(render("a  {{- ' b ' -}}  \n c"), "a b c");
  EXPECT_EQ(render("x\n"), "x");      // one trailing newline dropped
  EXPECT_EQ(render("x\n\n"), "x\n");  // only one
  EXPECT_EQ(render("a\r\nb"), "a\nb");
}

TEST(JinjaEngine, RecursionIsBounded) {
  const std::string src = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
  EXPECT_THAT(error_of(src), ::testing::HasSubstr("depth"));
}

TEST(JinjaEngine, LoopsAndRangesAreBounded) {
  EXPECT_THAT(error_of("{% for i in range(100000000) %}{% endfor %}"), ::testing::HasSubstr("range"));
  RenderLimits small;
  small.max_steps = 10'000;
  EXPECT_THAT(error_of("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", nlohmann::ordered_json::object(), small),
              ::testing::HasSubstr("steps"));
}

TEST(JinjaEngine, OutputAndValuesAreBounded) {
  RenderLimits small;
  small.max_output_bytes = 1000;
  EXPECT_THAT(error_of("{% for i in range(2000) %}x{% endfor %}", nlohmann::ordered_json::object(), small), ::testing::HasSubstr("exceeds"));
  EXPECT_THAT(error_of("{{ 'x' * 100000000000 }}"), ::testing::HasSubstr("exceeds"));
  EXPECT_THAT(error_of("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                       "{% endfor %}"),
              ::testing::HasSubstr("exceeds"));
  EXPECT_THAT(error_of("{{ 2 ** 64 }}"), ::testing::HasSubstr("overflow"));
}

TEST(JinjaEngine, DeepNestingIsASyntaxErrorNotACrash) {
  const std::string deep = std::string(5000, '(') + "1" + std::string(5000, ')');
  EXPECT_THAT(error_of("{{ " + deep + " }}"), ::testing::HasSubstr("deep"));
  EXPECT_THAT(error_of("{{ " + std::string(5000, '[') + " }}"), ::testing::HasSubstr("unterminated"));
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  EXPECT_THAT(error_of(blocks), ::testing::HasSubstr("deep"));
}

// Issue 23 row 1: left-leaning chains nest the tree as deeply as parentheses do; each one is a clean
// error, not a stack overflow (30,000 links, as in the reproduction).
TEST(JinjaEngine, LongLeftLeaningChainsAreASyntaxErrorNotACrash) {
  const auto chain = [](const std::string& head, const std::string& link) {
    std::string s = "{{ " + head;
    for (int i = 0; i < 30000; ++i) s += link;
    return s + " }}";
  };
  for (const std::string& src : {chain("1", " + 1"), chain("'a'", "|lower"), chain("'a'", " ~ 'a'"),
                                 chain("true", " and true"), chain("true", " or true"), chain("x", ".x"),
                                 chain("x", "[0]"), chain("x", " is not none"), chain("2", " * 2"),
                                 chain("2", " ** 2"), chain("f", "()"), chain("1", " if true else 1")}) {
    EXPECT_THAT(error_of(src), ::testing::HasSubstr("deep")) << src.substr(0, 40);
  }
  // Chains of ordinary length still render.
  EXPECT_EQ(render("{{ 1 + 1 + 1 + 1 + 1 }}{{ 'A'|lower|upper|lower }}{{ none is not none is not none }}"), "5aTrue");
}

// Issue 23 row 2: values copy, so the bytes built in total are bounded, not only each value.
TEST(JinjaEngine, TotalBytesBuiltAreBounded) {
  EXPECT_THAT(error_of("{% set s='x'*1000000 %}{% set l=[s]*1000 %}{{ l|length }}"), ::testing::HasSubstr("in total"));
  EXPECT_THAT(error_of("{% set s='x'*10000000 %}{% set l=[s]*1000000 %}{{ l|length }}"), ::testing::HasSubstr("in total"));
  RenderLimits small;
  small.max_total_bytes = 1 << 20;
  // 300 strings of 4 KiB each, built one at a time: no single value is large, their sum is.
  EXPECT_THAT(error_of("{% for i in range(300) %}{% set s = 'x' * 4096 %}{% endfor %}", nlohmann::ordered_json::object(), small),
              ::testing::HasSubstr("in total"));
  EXPECT_EQ(render("{% set s='x'*1000 %}{% set l=[s]*100 %}{{ l|length }}", nlohmann::ordered_json::object(), small), "100");
}

}  // namespace
}  // namespace ferry::jinja
