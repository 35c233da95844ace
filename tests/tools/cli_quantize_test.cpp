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

TEST(CliQuantize, GenProgressForFp8FoldersAndRandomModelLoads) {
  const std::string dir = test::temp_path("cli-gen-fp8-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  const auto gen = test::run_ferry("gen --shape tiny --type fp8-block -o " + dir);
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  EXPECT_NE(gen.output.find("gen tiny: done, "), std::string::npos) << gen.output;  // the log's last progress line
  std::filesystem::remove_all(dir);
  const auto quiet = test::run_ferry("gen --shape tiny --type fp8 -q -o " + dir);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("gen tiny"), std::string::npos) << quiet.output;
  std::filesystem::remove_all(dir);

  const auto run = test::run_ferry("run -m random:tiny:q8_0 -p hi -n 2 --temp 0");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("loading model: generating: done"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("loading model: mapping"), std::string::npos) << run.output;  // nothing is mapped

  // Split options: one line each for what cannot be.
  const auto fp8_split = test::run_ferry("gen --shape tiny --type fp8 --split-max-size 1M -o " + dir);
  EXPECT_EQ(fp8_split.exit_code, 1) << fp8_split.output;
  EXPECT_NE(fp8_split.output.find("a split GGUF is not written for --type fp8"), std::string::npos) << fp8_split.output;
  const auto bad_size = test::run_ferry("gen --shape tiny --split-max-size 12X -o " + dir + ".gguf");
  EXPECT_EQ(bad_size.exit_code, 1) << bad_size.output;
  EXPECT_NE(bad_size.output.find("--split-max-size '12X' is not a size such as 500M or 2G"), std::string::npos)
      << bad_size.output;
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
