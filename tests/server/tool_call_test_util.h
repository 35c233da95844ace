// Helpers of the tool-call parser tests: feed a text whole or in pieces and collect both the parser's calls
// and the streamed deltas put together; the text a real chat template makes a model write for a tool-call
// turn; the check that the calls came back.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fixtures/test_paths.h"
#include "server/tool_call_parser.h"
#include "tokenizer/chat_template.h"

namespace ferry::server::tool_call_test {

using nlohmann::ordered_json;
using test::read_file;
using test::shared_testdata;

struct Parsed {
  std::string content;
  std::vector<ToolCall> calls;        // the parser's complete calls
  std::vector<ToolCall> from_deltas;  // the streamed deltas put together
  bool failed = false;
};

// Feeds `text` in pieces of `piece` bytes (0: whole) and collects both views.
inline Parsed parse(ToolCallFormat format, const std::string& text, size_t piece = 0) {
  const std::unique_ptr<ToolCallParser> p = make_tool_call_parser(format, 42);
  Parsed out;
  auto take = [&](const ParsedText& t) {
    out.content += t.content;
    for (const ToolCallDelta& d : t.calls) {
      if (!d.id.empty()) {
        EXPECT_EQ(d.index, out.from_deltas.size());
        out.from_deltas.push_back({d.id, d.name, d.arguments});
      } else {
        EXPECT_EQ(d.index + 1, out.from_deltas.size());
        if (!out.from_deltas.empty()) out.from_deltas.back().arguments += d.arguments;
      }
    }
  };
  if (piece == 0) {
    take(p->feed(text));
  } else {
    for (size_t i = 0; i < text.size(); i += piece) take(p->feed(text.substr(i, piece)));
  }
  take(p->finish());
  out.calls = p->calls();
  out.failed = p->failed();
  return out;
}

inline ordered_json weather_calls(bool two) {
  ordered_json calls = ordered_json::array();
  calls.push_back({{"id", "abcdefghi"}, {"type", "function"},
                   {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}, {"unit", "celsius"}}}}}});
  if (two)
    calls.push_back({{"id", "jklmnopqr"}, {"type", "function"},
                     {"function", {{"name", "get_time"}, {"arguments", {{"zone", "CET"}, {"nested", {{"a", {1, 2}}}}}}}}});
  return calls;
}

inline ordered_json tools_json() {
  return ordered_json::array({{{"type", "function"},
                               {"function", {{"name", "get_weather"},
                                             {"description", "Weather in a city"},
                                             {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}, {"description", "The city"}}}}}}}}}}});
}

// The text a template makes the model write for an assistant turn with `calls` (end-of-turn text dropped).
inline std::optional<std::string> template_output(const std::string& file, const ordered_json& calls, const std::string& eot) {
  const auto dir = shared_testdata();
  if (!dir) return std::nullopt;
  ChatTemplate t(read_file(*dir + "/chat-templates/" + file), "<s>", eot);
  ordered_json messages = ordered_json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}});
  ordered_json ctx = {{"messages", messages}, {"tools", tools_json()}, {"add_generation_prompt", true}};
  const std::string prompt = t.render(ctx);
  ctx["messages"].push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", calls}});
  ctx["add_generation_prompt"] = false;
  const std::string full = t.render(ctx);
  EXPECT_EQ(full.substr(0, prompt.size()), prompt) << file;
  std::string out = full.substr(prompt.size());
  if (const size_t at = out.rfind(eot); at != std::string::npos) out.resize(at);
  return out;
}

inline void expect_calls(const Parsed& p, const ordered_json& calls, const std::string& what) {
  ASSERT_FALSE(p.failed) << what;
  ASSERT_EQ(p.calls.size(), calls.size()) << what;
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(p.calls[i].name, calls[i]["function"]["name"]) << what;
    const ordered_json& args = calls[i]["function"]["arguments"];
    EXPECT_EQ(nlohmann::json::parse(p.calls[i].arguments), nlohmann::json::parse(args.is_string() ? args.get<std::string>() : args.dump()))
        << what;
    EXPECT_EQ(p.from_deltas[i].name, p.calls[i].name) << what;
    EXPECT_EQ(p.from_deltas[i].arguments, p.calls[i].arguments) << what;  // the fragments add up exactly
    EXPECT_EQ(p.from_deltas[i].id, p.calls[i].id) << what;
  }
}

}  // namespace ferry::server::tool_call_test
