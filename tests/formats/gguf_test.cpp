#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "fixtures/test_paths.h"
#include "formats/gguf.h"

namespace ferry {
namespace {

// A small file exercising every metadata type, nested arrays, alignment and several tensor types.
GgufWriter sample_writer(std::vector<float>& f32_data, std::vector<uint8_t>& q_data, size_t alignment = 32) {
  GgufWriter w(alignment);
  w.set("general.architecture", GgufValue::str("llama"));
  w.set("u8", {GgufType::U8, uint64_t(200)});
  w.set("i8", {GgufType::I8, int64_t(-100)});
  w.set("u16", {GgufType::U16, uint64_t(60000)});
  w.set("i16", {GgufType::I16, int64_t(-30000)});
  w.set("u32", GgufValue::u32(4000000000u));
  w.set("i32", GgufValue::i32(-2000000000));
  w.set("u64", GgufValue::u64(1ull << 60));
  w.set("i64", {GgufType::I64, int64_t(-(1ll << 60))});
  w.set("f32", GgufValue::f32(1.5f));
  w.set("f64", {GgufType::F64, 2.25});
  w.set("bool", GgufValue::boolean(true));
  w.set("str", GgufValue::str("héllo"));
  w.set("strs", GgufValue::strings({"a", "", "ccc"}));
  w.set("nested", GgufValue::array(GgufType::Array, {GgufValue::i32s({1, 2}), GgufValue::i32s({3})}));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  f32_data.resize(3 * 5);
  for (float& x : f32_data) x = u(rng);
  q_data.resize(row_bytes(DType::Q8_0, 64) * 2);
  for (auto& b : q_data) b = uint8_t(rng());
  w.add_tensor("a", DType::F32, {3, 5}, f32_data.data());
  w.add_tensor("b", DType::Q8_0, {2, 64}, q_data.data());
  return w;
}

TEST(Gguf, RoundTripsEveryMetadataTypeAndTensors) {
  std::vector<float> f;
  std::vector<uint8_t> q;
  for (size_t alignment : {32, 64}) {
    const std::vector<uint8_t> bytes = sample_writer(f, q, alignment).to_bytes();
    const GgufFile g = GgufFile::parse(bytes.data(), bytes.size());
    EXPECT_EQ(g.version(), 3u);
    EXPECT_EQ(g.alignment(), alignment);
    EXPECT_EQ(g.get_string("general.architecture"), "llama");
    EXPECT_EQ(g.get_int("u8"), 200);
    EXPECT_EQ(g.get_int("i8"), -100);
    EXPECT_EQ(g.get_int("u16"), 60000);
    EXPECT_EQ(g.get_int("i16"), -30000);
    EXPECT_EQ(g.get_int("u32"), 4000000000ll);
    EXPECT_EQ(g.get_int("i32"), -2000000000);
    EXPECT_EQ(g.get_int("u64"), 1ll << 60);
    EXPECT_EQ(g.get_int("i64"), -(1ll << 60));
    EXPECT_EQ(g.get_float("f32"), 1.5);
    EXPECT_EQ(g.get_float("f64"), 2.25);
    EXPECT_TRUE(g.get_bool("bool", false));
    EXPECT_EQ(g.get_string("str"), "héllo");
    const auto& strs = g.find("strs")->as_array();
    ASSERT_EQ(strs.items.size(), 3u);
    EXPECT_EQ(strs.items[2].as_string(), "ccc");
    const auto& nested = g.find("nested")->as_array();
    ASSERT_EQ(nested.items.size(), 2u);
    EXPECT_EQ(nested.items[0].as_array().items[1].as_int(), 2);
    EXPECT_EQ(nested.items[1].as_array().items[0].as_int(), 3);

    const GgufTensorInfo* a = g.find_tensor("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->n_dims, 2);
    EXPECT_EQ(a->shape[0], 3);
    EXPECT_EQ(a->shape[1], 5);
    EXPECT_EQ(std::memcmp(a->data, f.data(), f.size() * 4), 0);
    const GgufTensorInfo* b = g.find_tensor("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->dtype, DType::Q8_0);
    EXPECT_EQ(b->nbytes, q.size());
    EXPECT_EQ((b->data - bytes.data()) % alignment, 0);
    EXPECT_EQ(std::memcmp(b->data, q.data(), q.size()), 0);
    // Metadata type mismatches name the key.
    try {
      g.get_int("str");
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'str'"), std::string::npos) << e.what();
    }
  }
}

TEST(Gguf, ReadsVersion2) {
  std::vector<float> f;
  std::vector<uint8_t> q;
  std::vector<uint8_t> bytes = sample_writer(f, q).to_bytes();
  bytes[4] = 2;  // v2 has the same layout with 64-bit counts
  const GgufFile g = GgufFile::parse(bytes.data(), bytes.size());
  EXPECT_EQ(g.version(), 2u);
  EXPECT_EQ(g.tensors().size(), 2u);
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  try {
    GgufFile::parse(bytes.data(), bytes.size(), "bad.gguf");
    FAIL() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Gguf, RejectsCorruptFilesWithClearErrors) {
  std::vector<float> f;
  std::vector<uint8_t> q;
  const std::vector<uint8_t> good = sample_writer(f, q).to_bytes();

  std::vector<uint8_t> bad = good;
  bad[0] = 'X';
  expect_error(bad, "bad magic");
  bad = good;
  bad[4] = 7;
  expect_error(bad, "unsupported GGUF version 7");
  // Every truncation before the end of the last tensor's bytes gives an error, never a crash (the padding
  // after the last tensor is optional).
  const GgufFile whole = GgufFile::parse(good.data(), good.size());
  const GgufTensorInfo& last = whole.tensors().back();
  const size_t data_end = size_t(last.data - good.data()) + last.nbytes;
  for (size_t n = 0; n < data_end; n += 7) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + n);
    EXPECT_THROW(GgufFile::parse(cut.data(), cut.size()), Error) << "prefix of " << n << " bytes";
  }
  // Absurd counts are rejected before anything is allocated.
  bad = good;
  const uint64_t huge = 1ull << 62;
  std::memcpy(bad.data() + 8, &huge, 8);
  expect_error(bad, "tensor count");
  bad = good;
  std::memcpy(bad.data() + 16, &huge, 8);
  expect_error(bad, "metadata count");
}

TEST(Gguf, RejectsBadTensorInfo) {
  const auto make = [](uint32_t type_id, std::vector<uint64_t> ne, uint64_t offset, size_t data_bytes) {
    std::vector<uint8_t> b;
    const auto put = [&](const void* p, size_t n) {
      const auto* c = static_cast<const uint8_t*>(p);
      b.insert(b.end(), c, c + n);
    };
    const uint32_t version = 3, n_dims = uint32_t(ne.size());
    const uint64_t n_tensors = 1, n_kv = 0, name_len = 1;
    put("GGUF", 4);
    put(&version, 4);
    put(&n_tensors, 8);
    put(&n_kv, 8);
    put(&name_len, 8);
    put("t", 1);
    put(&n_dims, 4);
    for (uint64_t e : ne) put(&e, 8);
    put(&type_id, 4);
    put(&offset, 8);
    b.resize((b.size() + 31) / 32 * 32 + data_bytes, 1);
    return b;
  };
  // A well-formed one parses.
  {
    auto ok = make(0, {4, 2}, 0, 32);
    EXPECT_NO_THROW(GgufFile::parse(ok.data(), ok.size()));
  }
  expect_error(make(99, {4}, 0, 16), "unknown tensor type 99");
  expect_error(make(0, {4, 2}, 0, 31), "runs past the end");
  expect_error(make(0, {4}, 1u << 20, 16), "runs past the end");
  expect_error(make(0, {4}, 3, 64), "not aligned");
  expect_error(make(0, {1ull << 40, 1ull << 40}, 0, 16), "overflows");
  expect_error(make(2, {33}, 0, 64), "whole number");
  expect_error(make(0, {1, 1, 1, 1, 1}, 0, 16), "dimensions");
}

TEST(Gguf, WriterRefusesInternalTypes) {
  GgufWriter w;
  std::vector<uint8_t> bytes(64);
  EXPECT_THROW(w.add_tensor("x", DType::Q8_0G4, {32}, bytes.data()), Error);
}

TEST(Gguf, WriterStreamsToDisk) {
  std::vector<float> f;
  std::vector<uint8_t> q;
  const std::string path = test::temp_path("writer_test.gguf");
  sample_writer(f, q).write(path);
  const GgufFile g = GgufFile::open(path);
  EXPECT_EQ(g.tensors().size(), 2u);
  EXPECT_EQ(std::memcmp(g.find_tensor("a")->data, f.data(), f.size() * 4), 0);
}

TEST(Gguf, OpensTheDefaultModel) {
  const auto path = test::default_model();
  if (!path) GTEST_SKIP() << "default model not downloaded";
  const GgufFile g = GgufFile::open(*path);
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_int("llama.block_count"), 30);
  EXPECT_EQ(g.tensors().size(), 272u);
  EXPECT_EQ(g.find_tensor("token_embd.weight")->dtype, DType::Q8_0);
  EXPECT_EQ(g.find_tensor("token_embd.weight")->shape[0], 49152);
  EXPECT_EQ(g.find("tokenizer.ggml.tokens")->as_array().items.size(), 49152u);
}

TEST(Gguf, MissingFileIsAClearError) {
  try {
    GgufFile::open("/nonexistent/model.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos);
  }
}

}  // namespace
}  // namespace ferry
