// End-to-end: starts the real `ferry serve` (127.0.0.1, port 0, the default model) and talks to it with curl,
// with an httplib client (batch invariance) and with the official `openai` Python client
// (openai_client_test.py, from the venv of scripts/install_test_deps.sh). Skips when the model, the ferry
// binary, curl or the venv is absent.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "fixtures/test_paths.h"
#include "serve_process.h"

namespace ferry::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// ctest runs each test in its own process, in parallel: temporary files carry the process id.
std::string unique_name(const std::string& name) { return "serve_e2e_" + std::to_string(getpid()) + "_" + name; }

struct CurlResult {
  int status = 0;
  std::string headers, body;
};

// curl -s: POST `data` (when given) to `url`; status, headers and body.
CurlResult curl(const std::string& url, const std::optional<std::string>& data = std::nullopt, const std::string& extra = "") {
  const std::string hdr = temp_path(unique_name("curl_headers.txt"));
  std::string cmd = "curl -s -m 60 -D " + hdr + " " + extra + " ";
  if (data) {
    const std::string body_file = temp_path(unique_name("curl_body.json"));
    FILE* f = std::fopen(body_file.c_str(), "wb");
    std::fwrite(data->data(), 1, data->size(), f);
    std::fclose(f);
    cmd += "-H 'Content-Type: application/json' --data-binary @" + body_file + " ";
  }
  cmd += "'" + url + "'";
  CurlResult r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.body.append(buf.data(), n);
  pclose(p);
  r.headers = read_file(hdr);
  if (r.headers.size() > 12) r.status = std::stoi(r.headers.substr(9, 3));
  return r;
}

bool have_prerequisites(std::string& why) {
  if (!default_model()) why = "the default model is absent";
  else if (!fs::exists(std::string(FERRY_BINARY_DIR) + "/ferry")) why = "the ferry binary is not built";
  else if (std::system("curl --version > /dev/null 2>&1") != 0) why = "curl is not installed";
  return why.empty();
}

class ServeE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    if (!have_prerequisites(why)) return;
    server_ = new ServeProcess({});
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr && server_->port() > 0) {
      EXPECT_EQ(server_->terminate(30), 0) << "SIGTERM must exit 0";
    }
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    std::string why;
    if (!have_prerequisites(why)) GTEST_SKIP() << why;
    ASSERT_TRUE(server_ != nullptr && server_->port() > 0) << "ferry serve did not start";
  }
  static ServeProcess* server_;
};
ServeProcess* ServeE2E::server_ = nullptr;

TEST_F(ServeE2E, CurlChatAndCompletions) {
  const std::string u = server_->url();
  CurlResult r = curl(u + "/health");
  EXPECT_EQ(r.status, 200);
  r = curl(u + "/v1/models");
  ASSERT_EQ(r.status, 200);
  const std::string model = json::parse(r.body)["data"][0]["id"];

  r = curl(u + "/v1/chat/completions", R"({"model": ")" + model + R"(", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_GT(j["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_LE(j["usage"]["completion_tokens"].get<int>(), 8);
  const std::string whole = j["choices"][0]["message"]["content"];

  r = curl(u + "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0, "stream": true})", "-N");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.headers.find("text/event-stream"), std::string::npos);
  std::vector<json> chunks;
  bool done = false;
  for (size_t pos = 0; (pos = r.body.find("data: ", pos)) != std::string::npos;) {
    const size_t end = r.body.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos) << "every event ends with a blank line";
    const std::string data = r.body.substr(pos + 6, end - pos - 6);
    if (data == "[DONE]") done = true;
    else chunks.push_back(json::parse(data));
    pos = end;
  }
  EXPECT_TRUE(done);
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  std::string streamed;
  for (const json& c : chunks) streamed += c["choices"][0]["delta"].value("content", std::string());
  EXPECT_EQ(streamed, whole);
  EXPECT_FALSE(chunks.back()["choices"][0]["finish_reason"].is_null());

  r = curl(u + "/v1/completions", R"({"prompt": [1, 2, 3, 4], "max_tokens": 5, "ignore_eos": true, "temperature": 0})");
  ASSERT_EQ(r.status, 200) << r.body;
  j = json::parse(r.body);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

TEST_F(ServeE2E, CurlErrors) {
  const std::string u = server_->url();
  const auto expect_error = [](const CurlResult& r, int status, const std::string& param) {
    EXPECT_EQ(r.status, status) << r.body;
    const json j = json::parse(r.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.body;
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"]["type"].is_string());
    if (param.empty()) EXPECT_TRUE(j["error"]["param"].is_null()) << r.body;
    else EXPECT_EQ(j["error"]["param"], param) << r.body;
  };
  expect_error(curl(u + "/v1/chat/completions", std::string("{\"messages\": [")), 400, "");
  expect_error(curl(u + "/v1/chat/completions", std::string(R"({"messages": [{"role": "user", "content": "x"}], "top_p": 7})")), 400, "top_p");
  expect_error(curl(u + "/v1/chat/completions", std::string(R"({"messages": [{"role": "user", "content": "x"}], "n": 17})")), 400, "n");
  expect_error(curl(u + "/v1/completions", std::string(R"({"prompt": "x", "model": "gpt-5"})")), 404, "model");
  expect_error(curl(u + "/v1/nothing"), 404, "");
  expect_error(curl(u + "/v1/completions", std::string(R"({"prompt": [999999999]})")), 400, "prompt");
  json long_prompt = {{"prompt", std::vector<int>(1024, 300)}};  // the server runs with --ctx 1024
  const CurlResult r = curl(u + "/v1/completions", long_prompt.dump());
  expect_error(r, 400, "prompt");
  EXPECT_NE(r.body.find("context_length_exceeded"), std::string::npos);
  // Still serving after all that.
  EXPECT_EQ(curl(u + "/health").status, 200);
}

// n = 3 on a prompt the server has not seen (its own cache partition, so not even the template's system
// prefix is cached): the usage counts the prompt once with 0 cached tokens (choices
// 1 and 2 reuse the K/V choice 0 wrote, which is not a cache hit of the request's prompt: before, the
// largest choice's figure was reported, nearly the whole prompt), completions summed; the same request
// again finds the prompt cached.
TEST_F(ServeE2E, NChoicesReportThePromptsCachedTokensOnce) {
  const std::string u = server_->url();
  const std::string body =
      R"({"messages": [{"role": "user", "content": "A fresh prompt for the n-choices usage check, long enough to fill )"
      R"(several KV blocks of the prefix cache: one two three four five six seven eight nine ten."}], "n": 3, )"
      R"("max_tokens": 3, "temperature": 1, "seed": 5, "ignore_eos": true, "cache_salt": "n-choices-usage"})";
  const CurlResult first = curl(u + "/v1/chat/completions", body);
  ASSERT_EQ(first.status, 200) << first.body;
  const json a = json::parse(first.body)["usage"];
  EXPECT_GT(a["prompt_tokens"].get<int>(), 32);
  EXPECT_EQ(a["completion_tokens"], 9);
  EXPECT_EQ(a["prompt_tokens_details"]["cached_tokens"], 0) << first.body;
  const CurlResult second = curl(u + "/v1/chat/completions", body);
  ASSERT_EQ(second.status, 200) << second.body;
  const json b = json::parse(second.body)["usage"];
  EXPECT_GT(b["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << second.body;
  EXPECT_LE(b["prompt_tokens_details"]["cached_tokens"].get<int>(), b["prompt_tokens"].get<int>());
}

// Reproduction (schemathesis): OpenAI's completions take no prompt (or null) as "<|endoftext|>", a new
// document; ferry answered 400 "'prompt': is required". It now starts from the model's BOS (else EOS).
TEST_F(ServeE2E, CompletionWithoutPromptStartsANewDocument) {
  const std::string u = server_->url();
  for (const std::string body : {R"({"prompt": null, "max_tokens": 3, "ignore_eos": true})", R"({"max_tokens": 3, "ignore_eos": true})"}) {
    const CurlResult r = curl(u + "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << body << ": " << r.body;
    const json j = json::parse(r.body);
    EXPECT_EQ(j["usage"]["prompt_tokens"], 1) << r.body;
    EXPECT_EQ(j["usage"]["completion_tokens"], 3) << r.body;
  }
  // max_tokens 0 (OpenAI's minimum, refused before): nothing generated, finish length.
  const CurlResult zero = curl(u + "/v1/completions", std::string(R"({"prompt": "hello", "max_tokens": 0})"));
  ASSERT_EQ(zero.status, 200) << zero.body;
  const json z = json::parse(zero.body);
  EXPECT_EQ(z["choices"][0]["text"], "");
  EXPECT_EQ(z["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(z["usage"]["completion_tokens"], 0);
}

// Temperature 0: a request's text is the same alone and inside a busy batch.
TEST_F(ServeE2E, GreedyTextIsBatchInvariant) {
  const auto complete = [&](const std::string& prompt) {
    httplib::Client c(server_->url());
    c.set_read_timeout(120, 0);
    const json body = {{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
    const auto res = c.Post("/v1/completions", body.dump(), "application/json");
    if (!res || res->status != 200) return std::string("<failed>");
    return json::parse(res->body)["choices"][0]["text"].get<std::string>();
  };
  const std::string target = "A short note on invariance: the weather";
  const std::string alone = complete(target);
  ASSERT_NE(alone, "<failed>");
  std::vector<std::future<std::string>> others;
  const std::vector<std::string> prompts = {"Count: one two", "Paris is the capital of", "def fib(n):\n", "Roses are red,"};
  for (const auto& p : prompts) others.push_back(std::async(std::launch::async, complete, p));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the target joins a batch already running
  const std::string busy = complete(target);
  for (auto& f : others) EXPECT_NE(f.get(), "<failed>");
  EXPECT_EQ(busy, alone);
}

// The request's "spec" field on a plain CPU server: n-gram speculation gives the same greedy text; a draft the
// server has not loaded is a 400.
TEST_F(ServeE2E, SpeculationPerRequestKeepsTheText) {
  const std::string u = server_->url();
  const std::string prompt = R"("prompt": "one two three four five, one two three four five, one two three", )";
  const std::string rest = R"("max_tokens": 24, "temperature": 0, "ignore_eos": true)";
  const CurlResult plain = curl(u + "/v1/completions", "{" + prompt + rest + "}");
  const CurlResult spec = curl(u + "/v1/completions", "{" + prompt + rest + R"(, "spec": "ngram", "spec_k": 4})");
  ASSERT_EQ(plain.status, 200) << plain.body;
  ASSERT_EQ(spec.status, 200) << spec.body;
  EXPECT_EQ(json::parse(spec.body)["choices"][0]["text"], json::parse(plain.body)["choices"][0]["text"]);
  const CurlResult draft = curl(u + "/v1/completions", "{" + prompt + rest + R"(, "spec": "draft"})");
  EXPECT_EQ(draft.status, 400) << draft.body;
  const CurlResult metrics = curl(u + "/metrics");
  EXPECT_NE(metrics.body.find("ferry_spec_proposed_tokens_total"), std::string::npos);
}

// A shell command's output (stdout and what it redirects there) and its wait status.
std::pair<std::string, int> run_command(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  return {out, pclose(p)};
}

TEST_F(ServeE2E, OpenAIPythonClient) {
  const std::string python = std::string(FERRY_BINARY_DIR) + "/.venv-test/bin/python";
  if (!fs::exists(python))
    GTEST_SKIP() << "no " << python << " (scripts/install_test_deps.sh " << FERRY_BINARY_DIR << " makes it; `make test` runs it)";
  const std::string cmd = "timeout 120 " + python + " " + source_dir() + "/tests/server/openai_client_test.py " + server_->url() + " 2>&1";
  const auto [out, status] = run_command(cmd);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
}

// The agent features (tools, structured output, n, reasoning) through the openai client: with the model's own
// template (SmolLM2's renders no tools: the Hermes fallback), with Qwen2.5's tool template (renders them) and
// with a DeepSeek-R1 distill's template (opens a <think> block), from ../shared/testdata.
std::string run_agent_script(const std::string& kind, const std::string& url) {
  const std::string python = std::string(FERRY_BINARY_DIR) + "/.venv-test/bin/python";
  const std::string cmd = "timeout 300 " + python + " " + source_dir() + "/tests/server/openai_agent_test.py " + kind + " " +
                          url + " 2>&1; echo \"exit=$?\"";
  return run_command(cmd).first;
}

TEST_F(ServeE2E, OpenAIClientAgentFeatures) {
  if (!fs::exists(std::string(FERRY_BINARY_DIR) + "/.venv-test/bin/python")) GTEST_SKIP() << "no test venv";
  const std::string out = run_agent_script("tools", server_->url());
  EXPECT_NE(out.find("exit=0"), std::string::npos) << out;
}

// OpenAI's published description of its API (../shared/testdata/openai-openapi) and ferry's own description of
// its other routes, exercised by schemathesis (tests/server/conformance/run_schemathesis.py starts its own server
// on tiny-llama): no server error, every response valid against the description, schema-valid requests accepted
// (but for the fields README lists as unsupported). Bounded: a few examples per operation, about a minute.
TEST(ServeConformance, SchemathesisFindsNothing) {
  const std::string python = std::string(FERRY_BINARY_DIR) + "/.venv-test/bin/python";
  if (!fs::exists(python)) GTEST_SKIP() << "no test venv (scripts/install_test_deps.sh makes it)";
  if (std::system((python + " -c 'import schemathesis' > /dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "schemathesis is not in the test venv";
  if (!shared_testdata()) GTEST_SKIP() << "no ../shared/testdata";
  if (!fs::exists(std::string(FERRY_BINARY_DIR) + "/ferry")) GTEST_SKIP() << "the ferry binary is not built";
  const std::string report = (fs::temp_directory_path() / ("ferry-schemathesis-" + std::to_string(getpid()))).string();
  const std::string cmd = "timeout 240 " + python + " " + source_dir() + "/tests/server/conformance/run_schemathesis.py " +
                          FERRY_BINARY_DIR + "/ferry --max-examples 8 --report " + report + " 2>&1; echo \"exit=$?\"";
  const std::string out = run_command(cmd).first;
  fs::remove_all(report);
  EXPECT_NE(out.find("exit=0"), std::string::npos) << out.substr(out.size() > 20000 ? out.size() - 20000 : 0);
}

TEST(ServeE2ETemplates, OpenAIClientToolTemplateAndReasoning) {
  std::string why;
  if (!have_prerequisites(why)) GTEST_SKIP() << why;
  if (!fs::exists(std::string(FERRY_BINARY_DIR) + "/.venv-test/bin/python")) GTEST_SKIP() << "no test venv";
  const auto data = shared_testdata();
  if (!data) GTEST_SKIP() << "no ../shared/testdata";
  {
    ServeProcess qwen({"--chat-template", *data + "/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"});
    ASSERT_GT(qwen.port(), 0);
    const std::string out = run_agent_script("tools", qwen.url());
    EXPECT_NE(out.find("exit=0"), std::string::npos) << out;
    EXPECT_EQ(qwen.terminate(30), 0);
  }
  ServeProcess r1({"--chat-template", *data + "/chat-templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"});
  ASSERT_GT(r1.port(), 0);
  const std::string out = run_agent_script("reasoning", r1.url());
  EXPECT_NE(out.find("exit=0"), std::string::npos) << out;
  EXPECT_EQ(r1.terminate(30), 0);
}

// A tiny waiting queue: extra requests get 429 with Retry-After; SIGTERM with requests in flight (grace 0:
// cancelled) exits 3, so that the lost work shows (issue 23).
TEST(ServeE2EQueue, QueueFullGives429ThenCleanShutdown) {
  std::string why;
  if (!have_prerequisites(why)) GTEST_SKIP() << why;
  ServeProcess server({"--max-running", "1", "--max-waiting", "1", "--shutdown-grace", "0"});
  ASSERT_GT(server.port(), 0) << "ferry serve did not start";
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": true, "stream": true})";
  std::vector<std::future<CurlResult>> calls;
  for (int i = 0; i < 4; ++i) {
    calls.push_back(std::async(std::launch::async, [&, i] {
      const std::string hdr = temp_path(unique_name("queue_headers_" + std::to_string(i) + ".txt"));  // one per curl
      const std::string cmd = "curl -s -m 60 -N -D " + hdr + " -H 'Content-Type: application/json' -d '" + body + "' " +
                              server.url() + "/v1/completions > /dev/null";
      std::system(cmd.c_str());
      CurlResult r;
      r.headers = read_file(hdr);
      if (r.headers.size() > 12) r.status = std::stoi(r.headers.substr(9, 3));
      return r;
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(server.terminate(30), 3) << "SIGTERM that cancels requests in flight must exit 3";
  int n429 = 0, n200 = 0;
  for (auto& f : calls) {
    const CurlResult r = f.get();
    if (r.status == 429) {
      ++n429;
      EXPECT_NE(r.headers.find("Retry-After"), std::string::npos) << r.headers;
    }
    n200 += r.status == 200;
  }
  EXPECT_GE(n429, 1);
  EXPECT_GE(n200, 1);
}

}  // namespace
}  // namespace ferry::test
