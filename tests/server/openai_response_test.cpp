// Response JSON in OpenAI's shapes (checked field by field against the API reference), error JSON, SSE
// framing and parsing.
#include <gtest/gtest.h>

#include <random>

#include "server/api_error.h"
#include "server/generation.h"
#include "server/openai_response.h"
#include "server/sse.h"

namespace ferry::server {
namespace {

using nlohmann::json;

TEST(OpenAIResponse, ErrorShape) {
  const json e = error_json(ApiError(400, "'top_p': bad", "top_p"));
  ASSERT_TRUE(e.contains("error"));
  EXPECT_EQ(e["error"]["message"], "'top_p': bad");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "top_p");
  EXPECT_TRUE(e["error"]["code"].is_null());
  const json q = error_json(429, "busy", "", "queue_full");
  EXPECT_EQ(q["error"]["type"], "rate_limit_error");
  EXPECT_TRUE(q["error"]["param"].is_null());
  EXPECT_EQ(q["error"]["code"], "queue_full");
}

TEST(OpenAIResponse, ChatWholeAndChunks) {
  const ResponseMeta meta{"chatcmpl-1", 123, "m", Endpoint::Chat};
  const RequestUsage usage{.prompt_tokens = 10, .cached_prompt_tokens = 4, .completion_tokens = 3};
  ChoiceResult hi{.finish_reason = "stop"};
  hi.message.content = "hi";
  const json whole = full_response(meta, {hi}, usage);
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "hi");
  EXPECT_TRUE(whole["choices"][0]["message"].contains("refusal") && whole["choices"][0]["message"]["refusal"].is_null());
  EXPECT_FALSE(whole["choices"][0]["message"].contains("tool_calls"));
  EXPECT_FALSE(whole["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(whole["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(whole["usage"]["total_tokens"], 13);
  EXPECT_EQ(whole["usage"]["prompt_tokens_details"]["cached_tokens"], 4);

  const json role = stream_chunk(meta, {.role = true});
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  ChunkChoice ab;
  ab.delta.content = "ab";
  const json text = stream_chunk(meta, ab);
  EXPECT_EQ(text["choices"][0]["delta"], json({{"content", "ab"}}));
  const json last = stream_chunk(meta, {.finish_reason = "length"});
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  const json u = usage_chunk(meta, usage);
  EXPECT_TRUE(u["choices"].is_array() && u["choices"].empty());
  EXPECT_EQ(u["usage"]["completion_tokens"], 3);
}

// Tool calls, reasoning and several choices, in OpenAI's shapes.
TEST(OpenAIResponse, ToolCallsReasoningAndChoices) {
  const ResponseMeta meta{"chatcmpl-2", 1, "m", Endpoint::Chat};
  ChoiceResult call{.index = 0, .finish_reason = "tool_calls"};
  call.message.reasoning = "think";
  call.message.tool_calls = {{"call_1", "get_weather", R"({"city": "Paris"})"}};
  ChoiceResult plain{.index = 1, .finish_reason = "stop"};
  plain.message.content = "ok";
  const json whole = full_response(meta, {call, plain}, {});
  ASSERT_EQ(whole["choices"].size(), 2u);
  const json& m = whole["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["reasoning_content"], "think");
  EXPECT_EQ(m["tool_calls"][0], json({{"id", "call_1"}, {"type", "function"},
                                      {"function", {{"name", "get_weather"}, {"arguments", R"({"city": "Paris"})"}}}}));
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(whole["choices"][1]["index"], 1);
  EXPECT_EQ(whole["choices"][1]["message"]["content"], "ok");

  ChunkChoice first{.index = 1};
  first.delta.reasoning = "hm";
  first.delta.calls = {{0, "call_1", "get_weather", ""}, {1, "", "", "{\"a\""}};
  const json c = stream_chunk(meta, first);
  EXPECT_EQ(c["choices"][0]["index"], 1);
  const json& d = c["choices"][0]["delta"];
  EXPECT_EQ(d["reasoning_content"], "hm");
  EXPECT_FALSE(d.contains("content"));
  EXPECT_EQ(d["tool_calls"][0], json({{"index", 0}, {"id", "call_1"}, {"type", "function"},
                                      {"function", {{"name", "get_weather"}, {"arguments", ""}}}}));
  EXPECT_EQ(d["tool_calls"][1], json({{"index", 1}, {"function", {{"arguments", "{\"a\""}}}}));
}

TEST(OpenAIResponse, LogprobShapes) {
  GeneratedToken a{.id = 5, .chosen = {5, "He", -0.25f}, .top = {{5, "He", -0.25f}, {9, "She", -1.5f}}};
  GeneratedToken b{.id = 7, .chosen = {7, "llo", -0.5f}, .top = {{7, "llo", -0.5f}, {8, "y", -2.0f}}};
  const std::vector<GeneratedToken> toks = {a, b};
  const json chat = logprobs_json(Endpoint::Chat, toks);
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["token"], "He");
  EXPECT_FLOAT_EQ(chat["content"][0]["logprob"].get<float>(), -0.25f);
  EXPECT_EQ(chat["content"][0]["bytes"], json({72, 101}));
  EXPECT_EQ(chat["content"][1]["top_logprobs"][1]["token"], "y");
  // OpenAI's schema requires "refusal" beside "content" (schemathesis found it missing).
  EXPECT_TRUE(chat.contains("refusal") && chat["refusal"].is_null());
  const json comp = logprobs_json(Endpoint::Completion, toks, 3);
  EXPECT_EQ(comp["tokens"], json({"He", "llo"}));
  EXPECT_EQ(comp["text_offset"], json({3, 5}));
  EXPECT_FLOAT_EQ(comp["top_logprobs"][0]["She"].get<float>(), -1.5f);
  EXPECT_FLOAT_EQ(comp["token_logprobs"][1].get<float>(), -0.5f);
}

TEST(OpenAIResponse, PartialUtf8TokenIsReplacedNotThrown) {
  GeneratedToken t{.id = 1, .chosen = {1, std::string("\xe2\x82"), -1.0f}, .top = {}};
  const json lp = logprobs_json(Endpoint::Chat, std::vector<GeneratedToken>{t});
  const std::string s = dump_json(lp);
  EXPECT_NE(s.find("\xef\xbf\xbd"), std::string::npos);  // U+FFFD
  EXPECT_EQ(lp["content"][0]["bytes"], json({0xe2, 0x82}));  // the exact bytes survive
}

TEST(OpenAIResponse, FinishReasonsAndIds) {
  EXPECT_STREQ(finish_reason_name(FinishReason::Stop), "stop");
  EXPECT_STREQ(finish_reason_name(FinishReason::Length), "length");
  EXPECT_STREQ(finish_reason_name(FinishReason::Cancelled), "abort");
  EXPECT_EQ(response_id(Endpoint::Chat, 1, 2).rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(response_id(Endpoint::Completion, 1, 2).rfind("cmpl-", 0), 0u);
  EXPECT_NE(response_id(Endpoint::Chat, 1, 2), response_id(Endpoint::Chat, 2, 2));
}

TEST(OpenAIResponse, PromptChecks) {
  const ModelFacts facts{{"m"}, 8, 100};
  EXPECT_NO_THROW(check_prompt({1, 2, 3, 4, 5, 6, 7}, Endpoint::Chat, facts));
  try {
    check_prompt({1, 2, 3, 4, 5, 6, 7, 8}, Endpoint::Chat, facts);
    FAIL() << "a prompt of the whole context must be refused";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.code(), "context_length_exceeded");
    EXPECT_EQ(e.param(), "messages");
  }
  EXPECT_THROW(check_prompt({}, Endpoint::Completion, facts), ApiError);
  EXPECT_THROW(check_prompt({100}, Endpoint::Completion, facts), ApiError);
  EXPECT_NO_THROW(check_model("", facts));
  EXPECT_NO_THROW(check_model("m", facts));
  try {
    check_model("gpt-4", facts);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 404);
    EXPECT_EQ(e.code(), "model_not_found");
  }
}

TEST(Sse, Framing) {
  EXPECT_EQ(sse_data(json({{"a", 1}})), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(Sse, ParserSurvivesAnySplit) {
  // Random events (with CRLF, comments and multi-line data) fed in random pieces come out whole and in order.
  std::mt19937 rng(7);
  std::string stream;
  std::vector<std::string> expect;
  for (int i = 0; i < 40; ++i) {
    const std::string payload = json({{"i", i}, {"s", std::string(size_t(rng() % 30), 'x')}}).dump();
    stream += (i % 3 == 0 ? ": keep-alive\n" : "") + std::string("data: ") + payload + (i % 4 == 0 ? "\r\n\r\n" : "\n\n");
    expect.push_back(payload);
  }
  stream += "data: line1\ndata: line2\n\n" + sse_done();
  expect.push_back("line1\nline2");
  expect.push_back("[DONE]");
  for (int trial = 0; trial < 20; ++trial) {
    SseParser p;
    std::vector<std::string> got;
    for (size_t pos = 0; pos < stream.size();) {
      const size_t n = std::min(stream.size() - pos, size_t(1 + rng() % 17));
      for (auto& e : p.feed(std::string_view(stream).substr(pos, n))) got.push_back(e);
      pos += n;
    }
    ASSERT_EQ(got, expect);
  }
}

}  // namespace
}  // namespace ferry::server
