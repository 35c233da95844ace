// Parsing and validation of OpenAI request bodies: accepted shapes fill ParsedRequest; every bad input is a
// 400 ApiError naming the parameter.
#include <gtest/gtest.h>

#include <limits>

#include <string>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace ferry::server {
namespace {

// The ApiError a body raises (status 0 when it parses).
ApiError error_of(Endpoint e, const std::string& body) {
  try {
    parse_request(e, body);
  } catch (const ApiError& err) {
    return err;
  }
  return ApiError(0, "no error");
}

TEST(OpenAIRequest, ChatFullParameterSet) {
  const ParsedRequest r = parse_request(Endpoint::Chat, R"({
    "model": "m", "messages": [{"role": "system", "content": "be brief"},
                               {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
                               {"role": "assistant", "content": null}, {"role": "developer", "content": "x"}],
    "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 20, "min_p": 0.1, "seed": 42,
    "stop": ["a", "bc"], "presence_penalty": 0.5, "frequency_penalty": -1.5, "logprobs": true, "top_logprobs": 3,
    "stream": true, "stream_options": {"include_usage": true}, "n": 1, "ignore_eos": true, "user": "ignored"})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].content, "Hi there");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].role, "system");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.template_messages[2]["content"], "");  // an assistant turn without content or calls: empty text
  // OpenAI's minimum max_tokens is 0 (schemathesis): nothing is generated.
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt": "x", "max_tokens": 0})").max_tokens, 0);
  EXPECT_EQ(parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 313332169214})")
                .max_tokens, std::numeric_limits<int32_t>::max());  // more than any context: up to its end
  EXPECT_GT(parse_request(Endpoint::Completion, R"({"prompt": "x", "top_p": 0})").sampling.top_p, 0.0f);  // the top token
  EXPECT_EQ(parse_request(Endpoint::Chat, R"({"messages": [{"role": "assistant"}, {"role": "user", "content": "x"}]})")
                .template_messages[0]["content"], "");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -1.5f);
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_FALSE(r.spec.has_value());
  EXPECT_EQ(r.spec_k, 0);
}

TEST(OpenAIRequest, SpeculationExtensionFields) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  const ParsedRequest r = parse_request(Endpoint::Chat, "{" + msgs + R"(, "spec": "ngram", "spec_k": 3})");
  EXPECT_EQ(r.spec, SpecMode::Ngram);
  EXPECT_EQ(r.spec_k, 3);
  EXPECT_EQ(parse_request(Endpoint::Chat, "{" + msgs + R"(, "spec": "off"})").spec, SpecMode::Off);
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt": "x", "spec": "draft"})").spec, SpecMode::Draft);
}

TEST(OpenAIRequest, ResponseFormats) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  auto format_of = [&](const std::string& f) { return parse_request(Endpoint::Chat, "{" + msgs + ", \"response_format\": " + f + "}").format; };
  EXPECT_EQ(format_of(R"({"type": "text"})").kind, OutputFormatKind::Text);
  EXPECT_EQ(format_of(R"({"type": "json_object"})").kind, OutputFormatKind::JsonObject);
  const OutputFormat js = format_of(R"({"type": "json_schema", "json_schema": {"name": "w", "strict": true,
      "schema": {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}}})");
  EXPECT_EQ(js.kind, OutputFormatKind::JsonSchema);
  EXPECT_EQ(js.text, R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}})");  // declared order
  EXPECT_EQ(format_of(R"({"type": "json_schema", "json_schema": {"name": "w"}})").text, "{}");
  const OutputFormat re = format_of(R"({"type": "regex", "regex": "[a-z]+"})");
  EXPECT_EQ(re.kind, OutputFormatKind::Regex);
  EXPECT_EQ(re.text, "[a-z]+");
  const OutputFormat g = format_of(R"({"type": "grammar", "grammar": "root ::= \"a\""})");
  EXPECT_EQ(g.kind, OutputFormatKind::Gbnf);
  EXPECT_EQ(g.text, "root ::= \"a\"");
}

TEST(OpenAIRequest, LogitBias) {
  const ParsedRequest r = parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}],
      "logit_bias": {"5": -100, "17": 2.5}})");
  ASSERT_EQ(r.logit_bias.size(), 2u);
  EXPECT_EQ(r.logit_bias[0], (std::pair<int32_t, float>{5, -100.0f}));  // in the order sent
  EXPECT_EQ(r.logit_bias[1], (std::pair<int32_t, float>{17, 2.5f}));
}

// JSON Schema counts 1937.0 as an integer (schemathesis sent it as a seed); 1.5 stays refused (BadRequests).
TEST(OpenAIRequest, IntegralFloatSeedIsAnInteger) {
  const ParsedRequest r =
      parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}], "seed": 1937.0})");
  EXPECT_EQ(r.sampling.seed, 1937u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt": "x", "seed": -2.0})").sampling.seed, uint64_t(-2));
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt": [[7, 313.0]]})").prompt_tokens, (std::vector<int32_t>{7, 313}));
  // An integer past int64 is its end: a max_tokens beyond the context runs to the context's end.
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt": "x", "max_tokens": 1e40})").max_tokens,
            std::numeric_limits<int32_t>::max());
}

TEST(OpenAIRequest, DefaultsAreOpenAIs) {
  const ParsedRequest r = parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}]})");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.0f);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FALSE(r.seed_given);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(r.stream);
  r.sampling.validate();  // the defaults are valid sampling parameters
}

TEST(OpenAIRequest, CompletionPromptForms) {
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt": "hello"})").prompt_text, "hello");
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt": ["hello"]})").prompt_text, "hello");
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt": [1, 2, 3]})").prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt": [[4, 5]]})").prompt_tokens, (std::vector<int32_t>{4, 5}));
  const ParsedRequest r = parse_request(Endpoint::Completion, R"({"prompt": "x", "logprobs": 2, "stop": "END", "max_tokens": 3})");
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.max_tokens, 3);
}

TEST(OpenAIRequest, MalformedJsonIs400WithoutParam) {
  for (const char* body : {"", "{", "{bad", "[1,2]", "\"str\"", "{\"messages\": [}", "\xff\xfe"}) {
    const ApiError e = error_of(Endpoint::Chat, body);
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.param(), "") << body;
  }
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  EXPECT_EQ(error_of(Endpoint::Chat, "{\"a\":" + deep + "}").status(), 400);
  // Brackets inside strings do not count as nesting.
  EXPECT_EQ(parse_request(Endpoint::Completion, "{\"prompt\": \"" + std::string(500, '[') + "\"}").prompt_text, std::string(500, '['));
}

TEST(OpenAIRequest, BadParametersAreNamed) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"temperature", R"("temperature": 2.5)"},
      {"temperature", R"("temperature": "hot")"},
      {"top_p", R"("top_p": 1.5)"},
      {"top_k", R"("top_k": 1.5)"},
      {"min_p", R"("min_p": -0.1)"},
      {"presence_penalty", R"("presence_penalty": 3)"},
      {"frequency_penalty", R"("frequency_penalty": -2.01)"},
      {"max_tokens", R"("max_tokens": -5)"},
      {"max_tokens", R"("max_tokens": 1.5)"},
      {"max_completion_tokens", R"("max_completion_tokens": "many")"},
      {"seed", R"("seed": 1.5)"},
      {"stop", R"("stop": 5)"},
      {"stop", R"("stop": ["a", 1])"},
      {"stop", R"("stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"])"},
      {"n", R"("n": 0)"},
      {"n", R"("n": 17)"},
      {"n", R"("n": 1.5)"},
      {"tools", R"("tools": {})"},
      {"tools[0].type", R"("tools": [{"type": "retrieval"}])"},
      {"tools[0].function", R"("tools": [{"type": "function"}])"},
      {"tools[0].function.name", R"("tools": [{"type": "function", "function": {"name": "bad name"}}])"},
      {"tools[0].function.parameters", R"("tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}])"},
      {"tools", R"("tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}])"},
      {"tool_choice", R"("tool_choice": "always")"},
      {"tool_choice", R"("tool_choice": "required")"},
      {"tool_choice", R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}})"},
      {"tool_choice", R"("tool_choice": 3)"},
      {"parallel_tool_calls", R"("parallel_tool_calls": "yes")"},
      {"functions", R"("functions": [{"name": "f"}])"},
      {"user", R"("user": 5)"},
      {"metadata", R"("metadata": [1])"},
      {"chat_template_kwargs", R"("chat_template_kwargs": [1])"},
      {"chat_template_kwargs", R"("chat_template_kwargs": {"messages": []})"},
      {"reasoning_format", R"("reasoning_format": "hidden")"},
      {"include_reasoning", R"("include_reasoning": "no")"},
      {"messages[1].reasoning_content", R"("messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "reasoning_content": 1}])"},
      {"stream", R"("stream": "yes")"},
      {"stream_options", R"("stream_options": {"include_usage": true})"},
      {"logprobs", R"("logprobs": 3)"},
      {"top_logprobs", R"("top_logprobs": 2)"},
      {"top_logprobs", R"("logprobs": true, "top_logprobs": 21)"},
      {"model", R"("model": 7)"},
      {"ignore_eos", R"("ignore_eos": 1)"},
      {"logit_bias", R"("logit_bias": {"5": 101})"},
      {"logit_bias", R"("logit_bias": {"x5": 1})"},
      {"logit_bias", R"("logit_bias": [1])"},
      {"echo", R"("echo": true)"},
      {"response_format", R"("response_format": "json")"},
      {"response_format.type", R"("response_format": {"type": "xml"})"},
      {"response_format.json_schema", R"("response_format": {"type": "json_schema"})"},
      {"response_format.json_schema.schema", R"("response_format": {"type": "json_schema", "json_schema": {"schema": 1}})"},
      {"response_format.regex", R"("response_format": {"type": "regex"})"},
      {"spec", R"("spec": "eagle")"},
      {"spec", R"("spec": "oracle")"},  // ferry bench only (Engine::replay_proposals)
      {"spec", R"("spec": 1)"},
      {"spec_k", R"("spec_k": 0)"},
      {"spec_k", R"("spec_k": 17)"},
      {"response_format.grammar", R"("response_format": {"type": "grammar", "grammar": 5})"},
  };
  for (const auto& [param, field] : cases) {
    const ApiError e = error_of(Endpoint::Chat, "{" + msgs + ", " + field + "}");
    EXPECT_EQ(e.status(), 400) << field;
    EXPECT_EQ(e.param(), param) << field;
    EXPECT_NE(std::string(e.what()).find(param), std::string::npos) << e.what();
  }
}

// Tools, tool_choice, tool-call history, n and the chat options, as the openai client sends them.
TEST(OpenAIRequest, ToolsHistoryAndChoices) {
  const ParsedRequest r = parse_request(Endpoint::Chat, R"({"messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"a\": 1}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
      {"role": "assistant", "content": "It is 18 C.", "reasoning_content": "The tool said 18."},
      {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "not json"}}]}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "strict": true,
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "a": {"type": "integer"}}}}}],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "parallel_tool_calls": false,
    "n": 3, "user": "u1", "metadata": {"k": "v"}, "store": false, "chat_template_kwargs": {"enable_thinking": false},
    "reasoning_format": "none", "include_reasoning": false, "service_tier": "auto"})");
  ASSERT_EQ(r.template_messages.size(), 5u);
  EXPECT_TRUE(r.template_messages[1]["content"].is_null());
  const auto& args = r.template_messages[1]["tool_calls"][0]["function"]["arguments"];
  ASSERT_TRUE(args.is_object());  // the template's tojson gets the object
  EXPECT_EQ(args.begin().key(), "city");  // in the order sent
  EXPECT_EQ(r.template_messages[1]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(r.template_messages[2]["role"], "tool");
  EXPECT_EQ(r.template_messages[2]["tool_call_id"], "call_1");
  EXPECT_EQ(r.template_messages[3]["reasoning_content"], "The tool said 18.");  // for templates that read it
  EXPECT_EQ(r.template_messages[4]["tool_calls"][0]["function"]["arguments"], "not json");  // kept as text
  ASSERT_EQ(r.tools.functions.size(), 1u);
  EXPECT_EQ(r.tools.functions[0].name, "get_weather");
  EXPECT_EQ(r.tools.functions[0].parameters["properties"].begin().key(), "city");
  EXPECT_EQ(r.tools.choice, ToolChoice::Function);
  EXPECT_EQ(r.tools.forced_name, "get_weather");
  EXPECT_FALSE(r.tools.parallel);
  EXPECT_TRUE(r.tools.forced());
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
  EXPECT_EQ(r.split_reasoning, false);
  EXPECT_FALSE(r.include_reasoning);

  const ParsedRequest none = parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"})");
  EXPECT_FALSE(none.tools.active());
  const ParsedRequest aut = parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}]})");
  EXPECT_EQ(aut.tools.choice, ToolChoice::Auto);  // tools without tool_choice: auto
  EXPECT_EQ(aut.tools.functions[0].parameters, nlohmann::ordered_json({{"type", "object"}}));
  const ParsedRequest empty = parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}], "tools": []})");
  EXPECT_FALSE(empty.tools.active());
}

TEST(OpenAIRequest, BadMessagesAndPrompts) {
  EXPECT_EQ(error_of(Endpoint::Chat, "{}").param(), "messages");
  EXPECT_EQ(error_of(Endpoint::Chat, R"({"messages": []})").param(), "messages");
  EXPECT_EQ(error_of(Endpoint::Chat, R"({"messages": [1]})").param(), "messages[0]");
  EXPECT_EQ(error_of(Endpoint::Chat, R"({"messages": [{"content": "x"}]})").param(), "messages[0].role");
  EXPECT_EQ(error_of(Endpoint::Chat, R"({"messages": [{"role": "wizard", "content": "x"}]})").param(), "messages[0].role");
  EXPECT_EQ(error_of(Endpoint::Chat, R"({"messages": [{"role": "user"}]})").param(), "messages[0].content");
  EXPECT_EQ(error_of(Endpoint::Chat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})").param(),
            "messages[0].content[0].type");
  EXPECT_TRUE(parse_request(Endpoint::Completion, "{}").prompt_absent);  // OpenAI's default: a new document
  EXPECT_TRUE(parse_request(Endpoint::Completion, R"({"prompt": null})").prompt_absent);
  EXPECT_FALSE(parse_request(Endpoint::Completion, R"({"prompt": ""})").prompt_absent);
  EXPECT_EQ(error_of(Endpoint::Completion, R"({"prompt": []})").param(), "prompt");
  EXPECT_EQ(error_of(Endpoint::Completion, R"({"prompt": [1, -2]})").param(), "prompt");
  EXPECT_EQ(error_of(Endpoint::Completion, R"({"prompt": [1, "a"]})").param(), "prompt");
  EXPECT_EQ(error_of(Endpoint::Completion, R"({"prompt": ["a", "b"]})").param(), "prompt");
  EXPECT_EQ(error_of(Endpoint::Completion, R"({"prompt": "x", "top_logprobs": 2})").param(), "top_logprobs");
  EXPECT_EQ(error_of(Endpoint::Completion, R"({"prompt": "x", "logprobs": 21})").param(), "logprobs");
}

TEST(OpenAIRequest, NullMeansAbsent) {
  const ParsedRequest r = parse_request(Endpoint::Chat,
      R"({"messages": [{"role": "user", "content": "x"}], "temperature": null, "stop": null, "n": null, "max_tokens": null, "seed": null})");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.max_tokens.has_value());
}

}  // namespace
}  // namespace ferry::server
