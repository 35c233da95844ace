// `ferry quantize` and `ferry gen` with K-quant types through the binary: a progress line per tensor with its types
// and sizes, a total line, an output that `ferry run` loads and generates from, and one clear line for bad input
// (an unknown type, a missing input).
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "fixtures/run_ferry.h"
#include "fixtures/test_paths.h"

namespace ferry {
namespace {

int count_lines_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

TEST(CliQuantize, FolderToQ4_K_MWithAProgressLinePerTensor) {
  const std::string src = test::source_dir() + "/tests/fixtures/models/tiny-qwen3";
  const std::string out = test::temp_path("cli-quantize-" + std::to_string(getpid()) + ".gguf");
  const auto r = test::run_ferry("quantize " + src + " " + out + " Q4_K_M -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // tiny-qwen3: 2 layers x 11 tensors + token_embd + output_norm (tied: no output.weight)
  EXPECT_EQ(count_lines_with(r.output, "/  24] "), 24) << r.output;
  EXPECT_NE(r.output.find("token_embd.weight"), std::string::npos);
  EXPECT_NE(r.output.find("bf16 -> q8_0"), std::string::npos) << r.output;  // tied embedding: the output's type
  EXPECT_NE(r.output.find("wrote " + out + ": 24 tensors"), std::string::npos) << r.output;
  const auto run = test::run_ferry("run -m " + out + " -p hello -n 4 --temp 0");
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

TEST(CliQuantize, GenWritesAKQuantMix) {
  const std::string out = test::temp_path("cli-gen-q5km-" + std::to_string(getpid()) + ".gguf");
  const auto r = test::run_ferry("gen --shape tiny --type q5_k_m -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto inspect = test::run_ferry("inspect " + out + " --tensors");
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("q5_1"), std::string::npos) << inspect.output;  // Q5_K on 64-wide rows falls back
  EXPECT_NE(inspect.output.find("general.file_type"), std::string::npos) << inspect.output;
}

TEST(CliQuantize, BadInputIsOneClearLine) {
  const std::string out = test::temp_path("cli-quantize-bad.gguf");
  const std::string src = test::source_dir() + "/tests/fixtures/models/tiny-llama";
  const auto r = test::run_ferry("quantize " + src + " " + out + " q4_k_s");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ferry: error: unknown quantization type 'q4_k_s'"), std::string::npos) << r.output;
  const auto missing = test::run_ferry("quantize /nonexistent " + out + " Q8_0");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("does not exist"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace ferry
