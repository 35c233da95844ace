// A model written as a split GGUF (GgufWriter::write_split, gguf-split's layout) against the same model in one
// file: the same tensors (type, shape, bytes) and the same logits bit for bit, whichever shard -m names; ferry
// quantize reads the split set and writes one plain file; a broken set is one error line from open_model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "fixtures/test_paths.h"
#include "formats/gguf.h"
#include "formats/gguf_split.h"
#include "model/file_logits.h"
#include "model/model_file.h"
#include "model/quantize_model.h"
#include "model/random_model.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

class SplitGgufModel : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder per case and process: one case rewriting the shards another was reading failed it.
    dir_ = test::case_temp_path("split_gguf_model");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const ModelConfig c = random_model_config("tiny");
    random_model_gguf(c, DType::Q8_0, 3).write(dir_ + "/one.gguf");
    shards_ = random_model_gguf(c, DType::Q8_0, 3).write_split(dir_ + "/tiny", {.max_bytes = 60000, .max_tensors = 0});
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
  std::vector<std::string> shards_;
};

TEST_F(SplitGgufModel, SameTensorsAndLogitsAsTheSingleFile) {
  ASSERT_EQ(shards_.size(), 3u);  // the tiny model's ~160 KB of tensors at 60 KB a shard
  const ModelFile one = open_model(dir_ + "/one.gguf");
  const std::vector<float> want = test::logits_of(dir_ + "/one.gguf", CpuKernels::Fast);
  for (const std::string& given : shards_) {
    const ModelFile split = open_model(given);
    ASSERT_EQ(split.tensors.size(), one.tensors.size());
    for (size_t i = 0; i < one.tensors.size(); ++i) {
      const auto& [name, t] = one.tensors[i];
      EXPECT_EQ(split.tensors[i].first, name);
      const Tensor& s = split.tensors[i].second;
      ASSERT_EQ(s.dtype, t.dtype) << name;
      ASSERT_EQ(s.shape_str(), t.shape_str()) << name;
      EXPECT_EQ(std::memcmp(s.data, t.data, t.nbytes()), 0) << name;
    }
    EXPECT_EQ(split.config.n_layers, one.config.n_layers);
    EXPECT_EQ(split.vocab.tokens.size(), one.vocab.tokens.size());
    EXPECT_EQ(test::logits_of(given, CpuKernels::Fast), want) << given;
  }
}

TEST_F(SplitGgufModel, QuantizeReadsTheSplitSetAndWritesOnePlainFile) {
  const std::string out = dir_ + "/f32.gguf";
  quantize_model({shards_[1], out, "F32", 1, {}});
  const GgufFile f = GgufFile::open(out);
  EXPECT_FALSE(f.has(kGgufSplitCount));
  EXPECT_FALSE(f.has(kGgufSplitNo));
  const std::vector<float> a = test::logits_of(out, CpuKernels::Reference);
  const std::vector<float> b = test::logits_of(shards_[0], CpuKernels::Reference);
  ASSERT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  EXPECT_LE(std::sqrt(num / den), 1e-5);  // Q8_0 dequantized to F32: the same rows the reference kernels read
}

TEST_F(SplitGgufModel, BrokenSetIsOneErrorLine) {
  fs::remove(shards_[2]);
  try {
    open_model(shards_[0]);
    FAIL() << "opened a split GGUF without its last shard";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("shard 3 of 3 is missing: " + shards_[2]), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace ferry
