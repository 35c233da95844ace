// `ferry batch` end to end on the tiny Llama fixture: OpenAI Batch API lines in, one result line per input line
// out (errors per line, the job goes on), the server's response shapes, and a rerun after a torn last line that
// skips what is finished and writes each custom_id once.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fixtures/run_ferry.h"
#include "fixtures/test_paths.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

TEST(CliBatch, RunsEveryLineKeepsGoingAndResumes) {
  const std::string model = test::source_dir() + "/tests/fixtures/models/tiny-llama";
  const std::string in = test::temp_path("batch_in.jsonl"), out = test::temp_path("batch_out.jsonl");
  fs::remove(out);
  {
    std::ofstream f(in);
    const auto completion = [](const std::string& id, const std::string& prompt) {
      return json{{"custom_id", id}, {"method", "POST"}, {"url", "/v1/completions"},
                  {"body", {{"prompt", prompt}, {"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}}}}.dump();
    };
    f << completion("a", "the river") << "\n";
    f << completion("b", "the river") << "\n";  // same request: same greedy text
    f << json{{"custom_id", "chat"}, {"method", "POST"}, {"url", "/v1/chat/completions"},
              {"body", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4}, {"temperature", 0}}}}
             .dump()
      << "\n";
    f << "\n";  // blank lines are not requests
    f << "{broken json\n";
    f << json{{"custom_id", "badurl"}, {"method", "POST"}, {"url", "/v1/embeddings"}, {"body", json::object()}}.dump() << "\n";
    f << json{{"custom_id", "badparam"}, {"method", "POST"}, {"url", "/v1/completions"},
              {"body", {{"prompt", "x"}, {"temperature", -1}}}}.dump()
      << "\n";
    f << completion("a", "dup") << "\n";  // a custom_id twice
    f << completion("c", "one more") << "\n";
  }
  const test::FerryRun r = test::run_ferry("batch -m " + model + " -i " + in + " -o " + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;  // some lines failed
  EXPECT_NE(r.output.find("8 lines: 4 succeeded, 4 failed, 0 already in"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("batch: done"), std::string::npos) << r.output;  // progress in the log
  std::vector<json> lines = read_lines(out);
  ASSERT_EQ(lines.size(), 8u);
  std::map<std::string, json> by_id;
  int no_id = 0;
  for (const json& l : lines) {
    EXPECT_EQ(l["id"].get<std::string>().rfind("batch_req_", 0), 0u);
    if (l["custom_id"].is_null()) {
      ++no_id;
      EXPECT_EQ(l["error"]["code"], "invalid_json");
      continue;
    }
    const std::string id = l["custom_id"];
    if (l["error"].is_object() && l["error"]["code"] == "duplicate_custom_id") {  // written at once, maybe before the first
      EXPECT_EQ(id, "a");
      continue;
    }
    EXPECT_EQ(by_id.count(id), 0u) << id;
    by_id[id] = l;
  }
  EXPECT_EQ(no_id, 1);
  ASSERT_EQ(by_id.size(), 6u);
  for (const char* id : {"a", "b", "c", "chat"}) {
    const json& l = by_id[id];
    ASSERT_EQ(l["response"]["status_code"], 200) << l.dump();
    EXPECT_TRUE(l["error"].is_null());
  }
  const json& a = by_id["a"]["response"]["body"];
  EXPECT_EQ(a["object"], "text_completion");
  EXPECT_EQ(a["usage"]["completion_tokens"], 5);
  EXPECT_EQ(a["choices"][0]["text"], by_id["b"]["response"]["body"]["choices"][0]["text"]);
  EXPECT_EQ(by_id["chat"]["response"]["body"]["object"], "chat.completion");
  EXPECT_EQ(by_id["badurl"]["error"]["code"], "invalid_url");
  EXPECT_TRUE(by_id["badurl"]["response"].is_null());
  EXPECT_EQ(by_id["badparam"]["response"]["status_code"], 400);
  EXPECT_EQ(by_id["badparam"]["response"]["body"]["error"]["param"], "temperature");

  // A crash mid-write: keep two whole lines and half of the third; the rerun cuts the torn part, skips the two and
  // runs the rest.
  std::stringstream keep;
  {
    std::ifstream f(out);
    std::string l1, l2, l3;
    std::getline(f, l1);
    std::getline(f, l2);
    std::getline(f, l3);
    keep << l1 << "\n" << l2 << "\n" << l3.substr(0, l3.size() / 2);
  }
  std::vector<std::string> first_two;
  for (size_t i = 0; i < 2; ++i) {
    const json id = read_lines(out)[i]["custom_id"];
    first_two.push_back(id.is_string() ? id.get<std::string>() : "");
  }
  { std::ofstream(out, std::ios::trunc) << keep.str(); }
  const test::FerryRun again = test::run_ferry("batch -q -m " + model + " -i " + in + " -o " + out);
  EXPECT_EQ(again.output.find("batch: done"), std::string::npos) << again.output;  // --quiet
  lines = read_lines(out);  // every line parses: the torn one is gone
  std::map<std::string, int> count;
  for (const json& l : lines)
    if (l["custom_id"].is_string()) ++count[l["custom_id"]];
  for (const char* id : {"a", "b", "c", "chat", "badurl", "badparam"}) EXPECT_GE(count[id], 1) << id;
  for (const std::string& id : first_two)
    if (!id.empty() && id != "a") {
      EXPECT_EQ(count[id], 1) << id << " ran twice";
    }
}

}  // namespace
}  // namespace ferry
