// `ferry score`: teacher-forced logits written by the binary must reproduce the transformers goldens of the
// checked-in tiny models (tests/golden/logits/*.bin, float32 CPU reference), whole prompts and in small
// chunks; bad token files end with one clear error and exit status 1.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fixtures/run_ferry.h"
#include "fixtures/test_paths.h"

namespace ferry {
namespace {

test::FerryRun run_ferry_score(const std::string& args) { return test::run_ferry("score " + args); }

std::string write_text(const std::string& name, const std::string& text) {
  const std::string path = test::temp_path(std::to_string(getpid()) + "_" + name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// (n_values) float32 LE values of a whole file.
std::vector<float> read_floats(const std::string& path) {
  const std::string bytes = test::read_file(path);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

std::string model_dir(const std::string& name) { return test::source_dir() + "/tests/fixtures/models/" + name; }

// Scores the golden prompts of `name` and compares against its golden logits: every value within
// rel_tol * max|golden| (logits are O(1..10); the goldens are float32 transformers on the CPU).
void expect_matches_golden(const std::string& name, const std::string& extra_args, double rel_tol) {
  const auto golden = nlohmann::json::parse(test::read_file(test::golden_dir() + "/logits/" + name + ".json"));
  const std::string tokens = write_text(name + "_tokens.json", nlohmann::json{{"prompts", golden["prompts"]}}.dump());
  const std::string out = test::temp_path(std::to_string(getpid()) + "_" + name + "_score.bin");
  const test::FerryRun r = run_ferry_score("-m " + model_dir(name) + " --tokens " + tokens + " -o " + out + " -t 2 " +
                                     extra_args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<float> got = read_floats(out);
  const std::vector<float> want = read_floats(test::golden_dir() + "/logits/" + golden["logits_file"].get<std::string>());
  size_t positions = 0;
  for (const auto& p : golden["prompts"]) positions += p.size();
  ASSERT_EQ(want.size(), positions * golden["vocab_size"].get<size_t>());
  ASSERT_EQ(got.size(), want.size());
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(double(want[i])));
    max_err = std::max(max_err, std::fabs(double(got[i]) - double(want[i])));
  }
  ASSERT_GT(max_ref, 1.0);  // non-flat logits: the comparison can fail
  EXPECT_LE(max_err / max_ref, rel_tol) << name << ": max |error| " << max_err << ", max |golden| " << max_ref;
  std::filesystem::remove(tokens);
  std::filesystem::remove(out);
}

void expect_clear_error(const test::FerryRun& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.output;  // 124 would be the timeout, -1 a signal
  EXPECT_NE(r.output.find("ferry: error:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.output;
}

TEST(CliScore, TinyLlamaMatchesGolden) { expect_matches_golden("tiny-llama", "", 1e-4); }

TEST(CliScore, TinyLlamaMatchesGoldenInSmallSteps) {
  // Prompts of 7, 11 and 16 tokens run in 3-token forward steps: the KV cache carries across steps.
  expect_matches_golden("tiny-llama", "--step-tokens 3", 1e-4);
}

TEST(CliScore, TinyQwen3MatchesGolden) {
  // bf16 weights, q/k norms, tied embeddings, sharded safetensors. The fast kernels quantize activations for
  // bf16 weights (the e2e test bounds their KL instead); the reference kernels must match the float32 golden.
  expect_matches_golden("tiny-qwen3", "--reference", 1e-4);
}

TEST(CliScore, BadTokenFiles) {
  const std::string m = "-m " + model_dir("tiny-llama") + " -o " + test::temp_path("cli_score_bad.bin") + " ";
  expect_clear_error(run_ferry_score(m + "--tokens /nonexistent/tokens.json"), "cannot open");
  expect_clear_error(run_ferry_score(m + "--tokens " + write_text("s1.json", "{\"prompts\": [[1, 2")),
                     "is not valid JSON");
  expect_clear_error(run_ferry_score(m + "--tokens " + write_text("s2.json", "[[1, 2]]")), "must be an object");
  expect_clear_error(run_ferry_score(m + "--tokens " + write_text("s3.json", "{\"prompts\": []}")), "no prompts");
  expect_clear_error(run_ferry_score(m + "--tokens " + write_text("s4.json", "{\"prompts\": [[1], []]}")),
                     "prompt 1 is empty");
  expect_clear_error(run_ferry_score(m + "--tokens " + write_text("s5.json", "{\"prompts\": [[1, \"a\"]]}")),
                     "prompt 0 position 1");
  expect_clear_error(run_ferry_score(m + "--tokens " + write_text("s6.json", "{\"prompts\": [[1, 2.5]]}")),
                     "not an integer token id");
  expect_clear_error(run_ferry_score(m + "--tokens " + write_text("s7.json", "{\"prompts\": [[-3]]}")),
                     "token id -3 out of range");
  expect_clear_error(run_ferry_score(m + "--tokens " + write_text("s8.json", "{\"prompts\": [[5, 9999999999]]}")),
                     "token id 9999999999 out of range");
  // In int32 range but past the model's vocabulary of 512: the engine's check, tagged with the prompt.
  expect_clear_error(run_ferry_score(m + "--tokens " + write_text("s9.json", "{\"prompts\": [[3], [4, 512]]}")),
                     "prompt 1: token id 512 out of range");
  expect_clear_error(run_ferry_score(m + "--ctx 2 --tokens " + write_text("s10.json", "{\"prompts\": [[3, 4, 5]]}")),
                     "shorter than the longest prompt");
}

TEST(CliScore, UnwritableOutput) {
  const std::string tokens = write_text("s11.json", "{\"prompts\": [[3, 4]]}");
  expect_clear_error(run_ferry_score("-m " + model_dir("tiny-llama") + " --tokens " + tokens +
                                     " -o /nonexistent/dir/out.bin"),
                     "cannot write");
}

}  // namespace
}  // namespace ferry
