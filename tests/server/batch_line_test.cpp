// server/batch_line.h: Batch API input lines parsed (or refused with a code), output lines in OpenAI's shape, and
// the finished custom_ids of an output file with a torn last line.
#include <gtest/gtest.h>

#include "server/batch_line.h"

namespace ferry::server {
namespace {

TEST(BatchLine, ParsesTheEnvelope) {
  const auto r = parse_batch_line(
      R"({"custom_id": "r1", "method": "POST", "url": "/v1/completions", "body": {"prompt": "hi", "max_tokens": 3}})");
  ASSERT_TRUE(std::holds_alternative<BatchLine>(r));
  const BatchLine& b = std::get<BatchLine>(r);
  EXPECT_EQ(b.custom_id, "r1");
  EXPECT_EQ(b.endpoint, Endpoint::Completion);
  EXPECT_EQ(parse_request(b.endpoint, b.body).prompt_text.value_or(""), "hi");  // the server's own parser reads it
}

TEST(BatchLine, RefusesWithACode) {
  const auto code = [](std::string_view line) {
    const auto r = parse_batch_line(line);
    return std::holds_alternative<BatchLineError>(r) ? std::get<BatchLineError>(r).code : std::string("accepted");
  };
  EXPECT_EQ(code("not json"), "invalid_json");
  EXPECT_EQ(code("[1]"), "invalid_json");
  EXPECT_EQ(code(R"({"method": "POST", "url": "/v1/completions", "body": {}})"), "missing_custom_id");
  EXPECT_EQ(code(R"({"custom_id": 7, "method": "POST", "url": "/v1/completions", "body": {}})"), "missing_custom_id");
  EXPECT_EQ(code(R"({"custom_id": "a", "method": "GET", "url": "/v1/completions", "body": {}})"), "invalid_method");
  EXPECT_EQ(code(R"({"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {}})"), "invalid_url");
  EXPECT_EQ(code(R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": "x"})"), "invalid_body");
  const auto r = parse_batch_line(R"({"custom_id": "keep", "method": "PUT"})");
  ASSERT_TRUE(std::holds_alternative<BatchLineError>(r));
  EXPECT_EQ(std::get<BatchLineError>(r).custom_id.value_or(""), "keep");  // reported under its id
}

TEST(BatchLine, OutputShapes) {
  const nlohmann::json ok = batch_response_line("r1", "cmpl-1", 200, {{"object", "text_completion"}});
  EXPECT_EQ(ok["custom_id"], "r1");
  EXPECT_EQ(ok["response"]["status_code"], 200);
  EXPECT_EQ(ok["response"]["body"]["object"], "text_completion");
  EXPECT_TRUE(ok["error"].is_null());
  EXPECT_EQ(ok["id"].get<std::string>().rfind("batch_req_", 0), 0u);
  const nlohmann::json bad = batch_error_line({std::nullopt, "invalid_json", "the line is not a JSON object"});
  EXPECT_TRUE(bad["custom_id"].is_null());
  EXPECT_TRUE(bad["response"].is_null());
  EXPECT_EQ(bad["error"]["code"], "invalid_json");
}

TEST(BatchLine, FinishedLinesStopAtATornLine) {
  const std::string good = R"({"custom_id": "a", "response": null})" "\n" R"({"custom_id": "b"})" "\n";
  FinishedLines f = finished_batch_lines(good + R"({"custom_id": "c", "resp)");
  EXPECT_EQ(f.custom_ids, (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(f.valid_bytes, good.size());
  f = finished_batch_lines(good + "garbage\n" + R"({"custom_id": "d"})" "\n");
  EXPECT_EQ(f.custom_ids.count("d"), 0u);  // nothing after a broken line counts
  EXPECT_EQ(f.valid_bytes, good.size());
}

}  // namespace
}  // namespace ferry::server
