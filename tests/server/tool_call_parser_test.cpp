// The tool-call parsers on real chat templates' output: an assistant turn with tool calls is rendered by the
// template of each family in ../shared/testdata/chat-templates (what the model was trained to write), the part
// after the generation prompt is fed to the parser whole and in every split, and the calls must come back.
// Also: streaming deltas add up to the whole, content around calls, bare JSON that is not a call, malformed
// and cut-off calls.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fixtures/test_paths.h"
#include "server/tool_call_parser.h"
#include "tool_call_test_util.h"

namespace ferry::server {
namespace {

using test::read_file;
using test::shared_testdata;

using nlohmann::ordered_json;
using tool_call_test::expect_calls;
using tool_call_test::parse;
using tool_call_test::Parsed;
using tool_call_test::template_output;
using tool_call_test::weather_calls;

struct Family {
  const char* file;
  ToolCallFormat format;
  const char* eot;
  const char* control_marker;  // a marker that is a control token (no text in the output), "" if none
  bool parallel;
};

const Family kFamilies[] = {
    {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::Hermes, "<|im_end|>", "", true},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::Hermes, "<|im_end|>", "", true},
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", ToolCallFormat::Hermes, "<|im_end|>", "", true},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::Llama3, "<|eot_id|>", "<|python_tag|>", false},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::Llama3, "<|eot_id|>", "<|python_tag|>", false},
    {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::Llama3, "<|eot_id|>", "<|python_tag|>", false},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::Mistral, "</s>", "[TOOL_CALLS]", true},
};

TEST(ToolCallParser, RealTemplateOutputs) {
  for (const Family& f : kFamilies) {
    const auto dir = shared_testdata();
    if (!dir) GTEST_SKIP() << "no ../shared/testdata";
    EXPECT_EQ(detect_tool_template(read_file(*dir + "/chat-templates/" + f.file)).format, f.format) << f.file;
    for (const bool two : {false, true}) {
      if (two && !f.parallel) continue;
      const ordered_json calls = weather_calls(two);
      const auto out = template_output(f.file, calls, f.eot);
      ASSERT_TRUE(out.has_value());
      std::vector<std::string> texts = {*out};
      // A control-token marker produces no text when the model writes it: the bare form must parse too.
      if (*f.control_marker != 0 && out->find(f.control_marker) != std::string::npos) {
        std::string bare = *out;
        bare.erase(bare.find(f.control_marker), std::string(f.control_marker).size());
        texts.push_back(bare);
      }
      for (const std::string& text : texts) {
        for (const size_t piece : {size_t(0), size_t(1), size_t(3), size_t(7)}) {
          const Parsed p = parse(f.format, text, piece);
          expect_calls(p, calls, std::string(f.file) + " piece " + std::to_string(piece) + ": " + text);
          std::string blank_free = p.content;
          std::erase_if(blank_free, [](char c) { return c == ' ' || c == '\n'; });
          EXPECT_EQ(blank_free, "") << f.file << ": " << text;
        }
      }
    }
  }
}

TEST(ToolCallParser, ContentAroundHermesCalls) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"arguments\": {\"q\": \"x\"}, \"name\": \"search\"}\n</tool_call>";
  for (const size_t piece : {size_t(0), size_t(1), size_t(2), size_t(5)}) {
    const Parsed p = parse(ToolCallFormat::Hermes, text, piece);
    EXPECT_EQ(p.content, "Let me check.\n");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].arguments, R"({"city": "Paris"})");
    EXPECT_EQ(p.calls[1].name, "search");  // arguments before the name: sent once the name is known
    EXPECT_EQ(p.calls[1].arguments, R"({"q": "x"})");
    EXPECT_EQ(p.from_deltas[1].arguments, R"({"q": "x"})");
    EXPECT_NE(p.calls[0].id, p.calls[1].id);
    EXPECT_EQ(p.calls[0].id.rfind("call_", 0), 0u);
  }
}

TEST(ToolCallParser, PlainTextAndLookalikes) {
  // No markup: everything is content, even text that begins like a tag.
  EXPECT_EQ(parse(ToolCallFormat::Hermes, "a < b and <tool", 1).content, "a < b and <tool");
  // A JSON answer whose first key is not a call's stays content (Llama 3 reads bare JSON as a call).
  const std::string answer = R"({"answer": 42, "name": "x"})";
  const Parsed a = parse(ToolCallFormat::Llama3, answer, 1);
  EXPECT_EQ(a.content, answer);
  EXPECT_TRUE(a.calls.empty());
  EXPECT_FALSE(a.failed);
  // A bracketed list is not a Mistral call.
  EXPECT_EQ(parse(ToolCallFormat::Mistral, "[1, 2] items", 2).content, "[1, 2] items");
  // Llama 3: arguments under either key, several calls separated by ";", arguments as a JSON string.
  const Parsed l = parse(ToolCallFormat::Llama3, R"({"name": "a", "parameters": {}}; {"name": "b", "arguments": "{\"k\": 1}"})", 1);
  ASSERT_EQ(l.calls.size(), 2u);
  EXPECT_EQ(l.calls[0].arguments, "{}");
  EXPECT_EQ(l.calls[1].arguments, R"({"k": 1})");
  EXPECT_EQ(l.from_deltas[1].arguments, R"({"k": 1})");
  // A call without arguments gets {}.
  EXPECT_EQ(parse(ToolCallFormat::Hermes, "<tool_call>{\"name\": \"now\"}</tool_call>").calls.at(0).arguments, "{}");
  // Mistral ids are 9 alphanumerics (its template checks).
  EXPECT_EQ(parse(ToolCallFormat::Mistral, R"([{"name": "a", "arguments": {}}])").calls.at(0).id.size(), 9u);
}

// Reproduction (chat_output fuzz): strings inside nested arguments were not tracked, so a bracket in one
// closed the arguments early.
TEST(ToolCallParser, BracketsInsideNestedStrings) {
  const std::string args = R"({"text": "a } b ] {", "list": ["x]", {"k": "}\"}"}]})";
  for (const ToolCallFormat f : {ToolCallFormat::Hermes, ToolCallFormat::Mistral}) {
    const std::string call = R"({"name": "f", "arguments": )" + args + "}";
    const std::string text = f == ToolCallFormat::Hermes ? "<tool_call>" + call + "</tool_call>" : "[" + call + "]";
    for (const size_t piece : {size_t(0), size_t(1), size_t(4)}) {
      const Parsed p = parse(f, text, piece);
      ASSERT_EQ(p.calls.size(), 1u) << text;
      EXPECT_EQ(p.calls[0].arguments, args);
      EXPECT_EQ(p.from_deltas[0].arguments, args);
    }
  }
}

TEST(ToolCallParser, MalformedAndCutOff) {
  // Cut off inside the second call's arguments (max_tokens): the first call stays, the open one is dropped.
  const std::string one = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n";
  for (const ToolCallFormat f : {ToolCallFormat::Hermes}) {
    const auto p = make_tool_call_parser(f, 1);
    (void)p->feed(one + "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"a\": ");
    (void)p->finish();
    EXPECT_FALSE(p->failed());
    EXPECT_TRUE(p->truncated());
    ASSERT_EQ(p->calls().size(), 1u);
    EXPECT_EQ(p->calls()[0].name, "f");
  }
  const Parsed cut = parse(ToolCallFormat::Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": ", 1);
  EXPECT_TRUE(cut.calls.empty());
  ASSERT_EQ(cut.from_deltas.size(), 1u);  // the stream had announced it
  // Bad JSON after the marker: failed, the rest is content.
  const Parsed bad = parse(ToolCallFormat::Hermes, "<tool_call>{\"name\" 1}</tool_call> tail", 1);
  EXPECT_TRUE(bad.failed);
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_NE(bad.content.find("tail"), std::string::npos);
  // Mismatched brackets inside the arguments.
  EXPECT_TRUE(parse(ToolCallFormat::Mistral, R"([{"name": "f", "arguments": {"a": [1}}])").failed);
  // A marker and nothing after it.
  EXPECT_TRUE(parse(ToolCallFormat::Hermes, "<tool_call>").failed);
  // The name must be a non-empty string.
  EXPECT_TRUE(parse(ToolCallFormat::Hermes, R"(<tool_call>{"name": 3, "arguments": {}}</tool_call>)").failed);
  // Arguments that are not an object.
  EXPECT_TRUE(parse(ToolCallFormat::Hermes, R"(<tool_call>{"name": "f", "arguments": [1]}</tool_call>)").failed);
}

TEST(ToolFormat, ForcedCallGrammarShape) {
  ToolRequest tools;
  tools.functions = {{"a", {{"type", "object"}}}, {"b", {{"type", "object"}, {"properties", {{"x", {{"type", "integer"}}}}}}}};
  tools.choice = ToolChoice::Required;
  const OutputFormat h = forced_tool_call_format(ToolCallFormat::Hermes, tools);
  EXPECT_EQ(h.kind, OutputFormatKind::JsonSchema);
  EXPECT_EQ(h.prefix, "<tool_call>\n");
  EXPECT_EQ(h.suffix, "\n</tool_call>");
  EXPECT_EQ(h.max_repeats, 0);  // parallel calls allowed
  EXPECT_EQ(nlohmann::json::parse(h.text)["anyOf"].size(), 2u);
  tools.parallel = false;
  EXPECT_EQ(forced_tool_call_format(ToolCallFormat::Hermes, tools).max_repeats, 1);
  EXPECT_EQ(nlohmann::json::parse(forced_tool_call_format(ToolCallFormat::Mistral, tools).text)["maxItems"], 1);
  tools.choice = ToolChoice::Function;
  tools.forced_name = "b";
  const auto one = nlohmann::json::parse(forced_tool_call_format(ToolCallFormat::Llama3, tools).text);
  EXPECT_EQ(one["properties"]["name"]["const"], "b");
  EXPECT_TRUE(one["properties"].contains("parameters"));
}

}  // namespace
}  // namespace ferry::server
