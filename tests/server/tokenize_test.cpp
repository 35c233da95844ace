// POST /tokenize and /detokenize bodies (llama-server and vLLM shapes) on the tiny fixture model.
#include <gtest/gtest.h>

#include "fixtures/test_paths.h"
#include "server/api_error.h"
#include "server/tokenize.h"

namespace ferry::server {
namespace {

TEST(Tokenize, RoundTripAndBadInput) {
  EngineOptions o;
  o.model_path = test::source_dir() + "/tests/fixtures/models/tiny-llama";
  o.context = 64;
  o.block_size = 4;
  o.n_threads = 1;
  ServingEngine engine(o, {});
  ModelFacts facts{{"tiny"}, 64, engine.info().vocab_size};
  const auto t = tokenize_response(R"({"content": "hello world", "add_special": false})", engine, facts);
  ASSERT_TRUE(t["tokens"].is_array());
  EXPECT_EQ(t["count"], t["tokens"].size());
  EXPECT_EQ(t["max_model_len"], 64);
  EXPECT_EQ(t["tokens"], tokenize_response(R"({"prompt": "hello world", "add_special": false})", engine, facts)["tokens"]);
  const auto d = detokenize_response(nlohmann::json{{"tokens", t["tokens"]}}.dump(), engine, facts);
  EXPECT_EQ(d["content"], "hello world");
  EXPECT_EQ(d["prompt"], "hello world");
  auto param_of = [&](const std::string& body, bool tokenize) {
    try {
      if (tokenize) tokenize_response(body, engine, facts);
      else detokenize_response(body, engine, facts);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      return e.param();
    }
    return std::string("no error");
  };
  EXPECT_EQ(param_of(R"({"content": 5})", true), "content");
  EXPECT_EQ(param_of(R"({"content": "x", "add_special": "yes"})", true), "add_special");
  EXPECT_EQ(param_of(R"({"tokens": [1, -1]})", false), "tokens");
  EXPECT_EQ(param_of(R"({"tokens": [99999999]})", false), "tokens");
  EXPECT_EQ(param_of("[1", false), "");
}

}  // namespace
}  // namespace ferry::server
