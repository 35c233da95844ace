// Split GGUF (formats/gguf_split.h): gguf-split's file names; GgufWriter::write_split's shards (metadata in shard 1,
// split.* in every shard, tensors in order, the limits); GgufSplitSet opened from any shard giving every tensor's
// bytes from its own shard; and one clear error for a missing shard, a wrong split.count or split.no, a tensor in
// two shards, a shard of another model, a tensor count that does not add up.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include <fmt/format.h>

#include "core/check.h"
#include "fixtures/test_paths.h"
#include "formats/gguf.h"
#include "formats/gguf_split.h"
#include "formats/gguf_split_name.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

TEST(GgufSplitName, ParsesGgufSplitNamesOnly) {
  const auto n = parse_gguf_split_name("/m/Llama-70B-Q4_K_M-00002-of-00003.gguf");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->prefix, "/m/Llama-70B-Q4_K_M");
  EXPECT_EQ(n->number, 2);
  EXPECT_EQ(n->count, 3);
  EXPECT_EQ(gguf_split_name(n->prefix, 1, 3), "/m/Llama-70B-Q4_K_M-00001-of-00003.gguf");
  EXPECT_EQ(gguf_split_name("x", 12, 345), "x-00012-of-00345.gguf");
  for (const char* bad : {"model.gguf", "x-00000-of-00003.gguf", "x-00004-of-00003.gguf", "x-0001-of-00003.gguf",
                          "x-00001-of-00003.bin", "-00001-of-00003.gguf", "d/-00001-of-00002.gguf",
                          "x-00001-of-99999.gguf", "x-0000a-of-00003.gguf", "x_00001-of-00003.gguf"})
    EXPECT_FALSE(parse_gguf_split_name(bad).has_value()) << bad;
}

// Five tensors "t0".."t4" of (2, 32) f32, t<i> filled with i + column / 100.
GgufWriter five_tensors(const std::string& arch = "llama") {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str(arch));
  w.set("general.name", GgufValue::str("five"));
  for (int i = 0; i < 5; ++i)
    w.add_tensor(fmt::format("t{}", i), DType::F32, {2, 32}, [i](uint8_t* dst, size_t n) {
      auto* f = reinterpret_cast<float*>(dst);
      for (size_t k = 0; k < n / 4; ++k) f[k] = float(i) + float(k % 32) / 100;
    });
  return w;
}

class GgufSplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::case_temp_path("gguf_split");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string at(const std::string& name) const { return dir_ + "/" + name; }
  static std::string open_error(const std::string& path) {
    try {
      GgufSplitSet::open(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  // A hand-made shard: split keys as given, tensors named `tensors`.
  void write_shard(const std::string& path, int64_t no, int64_t count, int64_t n_tensors,
                   const std::vector<std::string>& tensors, const std::string& arch = "") const {
    GgufWriter w;
    if (!arch.empty()) w.set("general.architecture", GgufValue::str(arch));
    w.set(kGgufSplitNo, {GgufType::U16, uint64_t(no)});
    w.set(kGgufSplitCount, {GgufType::U16, uint64_t(count)});
    w.set(kGgufSplitTensorsCount, GgufValue::i32(int32_t(n_tensors)));
    const float zeros[32] = {};
    for (const std::string& t : tensors) w.add_tensor(t, DType::F32, {32}, zeros);
    w.write(path);
  }
  std::string dir_;
};

TEST_F(GgufSplitTest, WriteSplitIsGgufSplitsLayoutAndOpensFromAnyShard) {
  const std::vector<std::string> paths = five_tensors().write_split(at("m"), {.max_bytes = 0, .max_tensors = 2});
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(paths[0], at("m-00001-of-00003.gguf"));
  EXPECT_EQ(paths[2], at("m-00003-of-00003.gguf"));
  // Each shard: a whole GGUF file with gguf-split's keys and types; the metadata only in shard 1.
  for (size_t k = 0; k < paths.size(); ++k) {
    const GgufFile f = GgufFile::open(paths[k]);
    EXPECT_EQ(f.find(kGgufSplitNo)->type, GgufType::U16);
    EXPECT_EQ(f.find(kGgufSplitCount)->type, GgufType::U16);
    EXPECT_EQ(f.find(kGgufSplitTensorsCount)->type, GgufType::I32);
    EXPECT_EQ(f.get_int(kGgufSplitNo), int64_t(k));
    EXPECT_EQ(f.get_int(kGgufSplitCount), 3);
    EXPECT_EQ(f.get_int(kGgufSplitTensorsCount), 5);
    EXPECT_EQ(f.has("general.name"), k == 0);
    EXPECT_EQ(f.tensors().size(), k < 2 ? 2u : 1u);
  }
  for (const std::string& given : paths) {
    const GgufSplitSet set = GgufSplitSet::open(given);
    EXPECT_TRUE(set.is_split());
    EXPECT_EQ(set.metadata().name(), paths[0]);
    EXPECT_EQ(set.metadata().get_string("general.name"), "five");
    ASSERT_EQ(set.tensors().size(), 5u);
    for (int i = 0; i < 5; ++i) {
      const GgufTensorInfo* t = set.find_tensor(fmt::format("t{}", i));
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(set.tensors()[size_t(i)], t);  // shard order
      const GgufFile& own = set.shards()[size_t(i / 2)];
      EXPECT_EQ(t->data, own.find_tensor(t->name)->data);  // mapped from its own shard
      EXPECT_FLOAT_EQ(reinterpret_cast<const float*>(t->data)[33], float(i) + 0.01f);
    }
  }
}

TEST_F(GgufSplitTest, SizeLimitAndPlainFiles) {
  // (2, 32) f32 = 256 bytes a tensor: 600 bytes hold two.
  EXPECT_EQ(five_tensors().write_split(at("s"), {.max_bytes = 600, .max_tensors = 0}).size(), 3u);
  EXPECT_EQ(five_tensors().write_split(at("one"), {.max_bytes = 1 << 20, .max_tensors = 0}),
            std::vector<std::string>{at("one-00001-of-00001.gguf")});
  const GgufSplitSet one = GgufSplitSet::open(at("one-00001-of-00001.gguf"));
  EXPECT_TRUE(one.is_split());
  EXPECT_EQ(one.tensors().size(), 5u);
  // A tensor larger than the limit gets a shard of its own, never none.
  EXPECT_EQ(five_tensors().write_split(at("big"), {.max_bytes = 10, .max_tensors = 0}).size(), 5u);
  five_tensors().write(at("plain.gguf"));
  const GgufSplitSet plain = GgufSplitSet::open(at("plain.gguf"));
  EXPECT_FALSE(plain.is_split());
  EXPECT_EQ(plain.shards().size(), 1u);
  EXPECT_EQ(plain.file_bytes(), fs::file_size(at("plain.gguf")));
}

TEST_F(GgufSplitTest, MissingShardIsNamed) {
  five_tensors().write_split(at("m"), {.max_bytes = 0, .max_tensors = 2});
  fs::remove(at("m-00002-of-00003.gguf"));
  const std::string e = open_error(at("m-00001-of-00003.gguf"));
  EXPECT_NE(e.find(fmt::format("shard 2 of 3 is missing: {}", at("m-00002-of-00003.gguf"))), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  EXPECT_NE(open_error(at("m-00003-of-00003.gguf")).find("shard 2 of 3 is missing"), std::string::npos);
}

TEST_F(GgufSplitTest, WrongSplitCountOrNumberIsNamed) {
  // Shard 2 says there are 4 shards.
  write_shard(at("c-00001-of-00002.gguf"), 0, 2, 2, {"a"}, "llama");
  write_shard(at("c-00002-of-00002.gguf"), 1, 4, 2, {"b"});
  std::string e = open_error(at("c-00001-of-00002.gguf"));
  EXPECT_NE(e.find(fmt::format("{}: split.count is 4, but shard 1", at("c-00002-of-00002.gguf"))), std::string::npos) << e;
  // The file name and its keys disagree.
  write_shard(at("n-00001-of-00002.gguf"), 1, 2, 2, {"a"}, "llama");
  e = open_error(at("n-00001-of-00002.gguf"));
  EXPECT_NE(e.find("the file name says shard 1 of 2, but split.no and split.count say shard 2 of 2"), std::string::npos)
      << e;
  // A shard renamed so that the others cannot be found.
  five_tensors().write_split(at("r"), {.max_bytes = 0, .max_tensors = 3});
  fs::rename(at("r-00001-of-00002.gguf"), at("renamed.gguf"));
  e = open_error(at("renamed.gguf"));
  EXPECT_NE(e.find("its name is not PREFIX-NNNNN-of-MMMMM.gguf"), std::string::npos) << e;
  // split.no out of range, split.count zero.
  write_shard(at("z-00001-of-00002.gguf"), 5, 2, 2, {"a"}, "llama");
  EXPECT_NE(open_error(at("z-00001-of-00002.gguf")).find("'split.no' is 5, outside 0..1"), std::string::npos);
  write_shard(at("zero.gguf"), 0, 0, 1, {"a"}, "llama");
  EXPECT_NE(open_error(at("zero.gguf")).find("'split.count' is 0, outside 1..65535"), std::string::npos);
}

TEST_F(GgufSplitTest, DuplicateTensorAcrossShardsIsNamed) {
  write_shard(at("d-00001-of-00002.gguf"), 0, 2, 2, {"a"}, "llama");
  write_shard(at("d-00002-of-00002.gguf"), 1, 2, 2, {"a"});
  const std::string e = open_error(at("d-00002-of-00002.gguf"));
  EXPECT_NE(e.find(fmt::format("tensor 'a' is in shard 1 ({}) and again in shard 2", at("d-00001-of-00002.gguf"))),
            std::string::npos)
      << e;
}

TEST_F(GgufSplitTest, ShardOfAnotherModelIsNamed) {
  // Two models split in two, shard 2 swapped: the tensor counts differ.
  five_tensors().write_split(at("a"), {.max_bytes = 0, .max_tensors = 3});
  GgufWriter six = five_tensors();
  const float zeros[32] = {};
  six.add_tensor("t5", DType::F32, {32}, zeros);
  six.write_split(at("b"), {.max_bytes = 0, .max_tensors = 3});
  fs::copy_file(at("b-00002-of-00002.gguf"), at("a-00002-of-00002.gguf"), fs::copy_options::overwrite_existing);
  std::string e = open_error(at("a-00001-of-00002.gguf"));
  EXPECT_NE(e.find(fmt::format("{}: split.tensors.count is 6, but shard 1", at("a-00002-of-00002.gguf"))), std::string::npos) << e;
  EXPECT_NE(e.find("a shard of another model?"), std::string::npos) << e;
  // Same counts, another architecture written into the shard.
  write_shard(at("x-00001-of-00002.gguf"), 0, 2, 2, {"a"}, "llama");
  write_shard(at("x-00002-of-00002.gguf"), 1, 2, 2, {"b"}, "qwen3");
  e = open_error(at("x-00001-of-00002.gguf"));
  EXPECT_NE(e.find("general.architecture is 'qwen3', but shard 1"), std::string::npos) << e;
  // The counts agree but the shards hold fewer tensors than split.tensors.count says.
  write_shard(at("f-00001-of-00002.gguf"), 0, 2, 3, {"a"}, "llama");
  write_shard(at("f-00002-of-00002.gguf"), 1, 2, 3, {"b"});
  e = open_error(at("f-00001-of-00002.gguf"));
  EXPECT_NE(e.find("its 2 shards hold 2 tensors, but split.tensors.count says 3"), std::string::npos) << e;
  // A plain file where a shard should be.
  write_shard(at("p-00001-of-00002.gguf"), 0, 2, 2, {"a"}, "llama");
  GgufWriter plain;
  plain.add_tensor("b", DType::F32, {32}, zeros);
  plain.write(at("p-00002-of-00002.gguf"));
  e = open_error(at("p-00001-of-00002.gguf"));
  EXPECT_NE(e.find("no 'split.count' key, so it is not a shard of the split GGUF"), std::string::npos) << e;
}

TEST_F(GgufSplitTest, FirstShardWithoutTensorsIsFine) {
  // gguf-split --no-tensor-first-split: shard 1 holds only the metadata.
  write_shard(at("e-00001-of-00002.gguf"), 0, 2, 2, {}, "llama");
  write_shard(at("e-00002-of-00002.gguf"), 1, 2, 2, {"a", "b"});
  const GgufSplitSet set = GgufSplitSet::open(at("e-00001-of-00002.gguf"));
  EXPECT_EQ(set.tensors().size(), 2u);
  EXPECT_EQ(set.metadata().get_string("general.architecture"), "llama");
}

}  // namespace
}  // namespace ferry
