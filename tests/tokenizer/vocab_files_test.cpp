// Every ../shared/testdata/vocab/ggml-vocab-NAME.gguf must tokenize its .inp strings exactly as the .out
// lines say (the models' own Hugging Face tokenizers, no BOS).
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace ferry {
namespace {

std::vector<std::string> split_inputs(const std::string& data) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t next = data.find(sep, pos);
    if (next == std::string::npos) break;
    out.push_back(data.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return out;
}

std::vector<std::vector<int32_t>> parse_outputs(const std::string& data) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream lines(data);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ids(line);
    std::vector<int32_t> v;
    int32_t id;
    while (ids >> id) v.push_back(id);
    out.push_back(v);
  }
  return out;
}

class VocabFile : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabFile, MatchesHuggingFace) {
  const auto dir = test::shared_testdata();
  if (!dir) GTEST_SKIP() << "../shared/testdata is absent";
  const std::string base = *dir + "/vocab/ggml-vocab-" + GetParam() + ".gguf";
  if (!std::filesystem::exists(base)) GTEST_SKIP() << base << " is absent";
  const Tokenizer tok(vocab_from_gguf(GgufFile::open(base)));
  const auto inputs = split_inputs(test::read_file(base + ".inp"));
  const auto expected = parse_outputs(test::read_file(base + ".out"));
  ASSERT_EQ(inputs.size(), expected.size());
  ASSERT_GT(inputs.size(), 20u);
  int passed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto ids = tok.encode(inputs[i], /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids, expected[i]) << GetParam() << " string " << i << ": '" << inputs[i] << "'";
    passed += ids == expected[i];
    // Round trip: the pieces give back the text.
    EXPECT_EQ(tok.decode(ids), inputs[i]) << GetParam() << " string " << i;
  }
  std::printf("[ %s ] %d/%zu strings agree\n", GetParam().c_str(), passed, inputs.size());
}

INSTANTIATE_TEST_SUITE_P(All, VocabFile,
                         ::testing::Values("gpt-2", "llama-spm", "phi-3", "mpt", "falcon", "starcoder", "refact",
                                           "deepseek-llm", "deepseek-coder"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

}  // namespace
}  // namespace ferry
