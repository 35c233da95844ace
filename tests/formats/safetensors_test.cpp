#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/fp16.h"
#include "fixtures/test_paths.h"
#include "formats/safetensors.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

// Raw file: u64 LE header length, header text, data. No validation: tests feed it broken headers.
Bytes raw_file(const std::string& header, const Bytes& data) {
  Bytes out(8 + header.size() + data.size());
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

struct Entry {
  std::string name;
  std::string dtype;             // "F32", "BF16", ...
  std::vector<uint64_t> shape;   // outermost first
  Bytes bytes;
};

// A well-formed file as the safetensors library writes it: entries packed in order, header padded with
// spaces to a multiple of 8 so that data stays aligned.
Bytes build_file(const std::vector<Entry>& entries, const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  Bytes data;
  for (const Entry& e : entries) {
    h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {data.size(), data.size() + e.bytes.size()}}};
    data.insert(data.end(), e.bytes.begin(), e.bytes.end());
  }
  std::string header = h.dump();
  while ((8 + header.size()) % 8) header += ' ';
  return raw_file(header, data);
}

Bytes random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = uint8_t(rng() | 1);  // never all zero
  return b;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

template <typename T>
Bytes as_bytes(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

SafetensorsFile parse(const Bytes& b) { return SafetensorsFile::parse(b.data(), b.size(), "test.safetensors"); }

// Expects parsing to throw ferry::Error whose message contains `needle`.
void expect_parse_error(const Bytes& b, const std::string& needle) {
  try {
    parse(b);
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

std::string header_with(const std::string& entry_json) { return "{\"t\":" + entry_json + "}"; }

TEST(Safetensors, RoundTripsPlainTypes) {
  const auto f32 = random_floats(3 * 5, 1);
  std::vector<uint16_t> f16, bf16;
  for (float x : random_floats(4 * 2 * 3, 2)) f16.push_back(f32_to_fp16(x));
  for (float x : random_floats(7, 3)) bf16.push_back(f32_to_bf16(x));
  const Bytes file = build_file({{"w.f32", "F32", {3, 5}, as_bytes(f32)},
                                 {"w.f16", "F16", {4, 2, 3}, as_bytes(f16)},
                                 {"w.bf16", "BF16", {7}, as_bytes(bf16)}},
                                {{"format", "pt"}, {"note", "héllo"}});
  const SafetensorsFile st = parse(file);
  ASSERT_EQ(st.tensors().size(), 3u);
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.metadata().at("note"), "héllo");
  // tensors() is in data order, which is the order they were packed in.
  EXPECT_EQ(st.tensors()[0].name, "w.f32");
  EXPECT_EQ(st.tensors()[2].name, "w.bf16");

  const SafetensorsTensor* a = st.find("w.f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::F32);
  EXPECT_EQ(a->n_dims, 2);
  EXPECT_EQ(a->shape[0], 3);
  EXPECT_EQ(a->shape[1], 5);
  EXPECT_EQ(a->nbytes, f32.size() * 4);
  const Tensor va = a->view();
  EXPECT_EQ(va.numel(), 15);
  EXPECT_EQ(va.rows(), 3);
  for (size_t i = 0; i < f32.size(); ++i) ASSERT_EQ(va.ptr<float>()[i], f32[i]);

  const SafetensorsTensor* b = st.find("w.f16");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::F16);
  EXPECT_EQ(b->view().shape_str(), "(4, 2, 3)");
  for (size_t i = 0; i < f16.size(); ++i) ASSERT_EQ(b->view().ptr<uint16_t>()[i], f16[i]);

  const SafetensorsTensor* c = st.find("w.bf16");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, DType::BF16);
  EXPECT_EQ(c->file_dtype, "BF16");
  for (size_t i = 0; i < bf16.size(); ++i) ASSERT_EQ(c->view().ptr<uint16_t>()[i], bf16[i]);

  EXPECT_EQ(st.find("missing"), nullptr);
  EXPECT_FALSE(st.contains("missing"));
}

TEST(Safetensors, OpensFromDisk) {
  const auto v = random_floats(6, 4);
  const Bytes file = build_file({{"x", "F32", {2, 3}, as_bytes(v)}});
  const std::string path = test::temp_path("st_open.safetensors");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(file.data()), std::streamsize(file.size()));
  const SafetensorsFile st = SafetensorsFile::open(path);
  EXPECT_EQ(st.name(), path);
  ASSERT_NE(st.find("x"), nullptr);
  EXPECT_EQ(st.find("x")->view().ptr<float>()[5], v[5]);
  EXPECT_THROW(SafetensorsFile::open(test::temp_path("st_no_such_file.safetensors")), Error);
}

TEST(Safetensors, OtherCoreTypesAndEdgeShapes) {
  const Bytes file = build_file({{"f64", "F64", {2}, random_bytes(16, 5)},
                                 {"i64", "I64", {1, 2}, random_bytes(16, 6)},
                                 {"i32", "I32", {2}, random_bytes(8, 7)},
                                 {"scalar", "F32", {}, random_bytes(4, 8)},
                                 {"empty", "F32", {0, 64}, {}}});
  const SafetensorsFile st = parse(file);
  EXPECT_EQ(st.find("f64")->dtype, DType::F64);
  EXPECT_EQ(st.find("i64")->dtype, DType::I64);
  EXPECT_EQ(st.find("i32")->dtype, DType::I32);
  EXPECT_EQ(st.find("scalar")->n_dims, 0);
  EXPECT_EQ(st.find("scalar")->view().numel(), 1);
  EXPECT_EQ(st.find("empty")->nbytes, 0u);
  EXPECT_EQ(st.find("empty")->view().numel(), 0);
}

TEST(Safetensors, UnsupportedTypesParseButRefuseUse) {
  const Bytes file = build_file({{"scale", "F8_E4M3", {4, 4}, random_bytes(16, 9)},
                                 {"mask", "BOOL", {3}, random_bytes(3, 10)},
                                 {"packed", "F4", {6}, random_bytes(3, 11)},
                                 {"conv", "F32", {1, 1, 1, 1, 2}, random_bytes(8, 12)},
                                 {"ok", "F32", {2}, random_bytes(8, 13)}});
  const SafetensorsFile st = parse(file);
  ASSERT_EQ(st.tensors().size(), 5u);
  EXPECT_TRUE(st.contains("scale"));
  for (const auto& t : st.tensors()) EXPECT_EQ(t.supported(), t.name == "ok") << t.name;
  try {
    st.find("scale");
    ADD_FAILURE() << "find of an F8 tensor should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported dtype F8_E4M3 for tensor 'scale'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(st.find("mask"), Error);
  EXPECT_THROW(st.tensors()[0].view(), Error);
  try {
    st.find("conv");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("5 dimensions"), std::string::npos) << e.what();
  }
  EXPECT_NE(st.find("ok"), nullptr);
}

TEST(Safetensors, RejectsBrokenFraming) {
  expect_parse_error({1, 2, 3}, "too short");
  expect_parse_error(Bytes{}, "too short");
  Bytes past = raw_file("{}", {});
  const uint64_t big = 1000;
  std::memcpy(past.data(), &big, 8);
  expect_parse_error(past, "runs past the end of the file");
  const uint64_t huge = ~uint64_t(0);
  std::memcpy(past.data(), &huge, 8);
  expect_parse_error(past, "runs past the end of the file");
  expect_parse_error(raw_file("{\"t\": {", {}), "malformed JSON");
  expect_parse_error(raw_file("[1, 2]", {}), "not a JSON object");
  expect_parse_error(raw_file("", {}), "too short");
  expect_parse_error(raw_file("{\"__metadata__\": {\"k\": 1}}", {}), "not a string");
  expect_parse_error(raw_file("{\"__metadata__\": []}", {}), "__metadata__ is not an object");
  const std::string entry = "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}";
  expect_parse_error(raw_file("{\"t\":" + entry + ",\"t\":" + entry + "}", random_bytes(4, 1)), "lists 't' twice");
}

TEST(Safetensors, RejectsBadEntries) {
  const Bytes d16 = random_bytes(16, 14);
  auto bad = [&](const std::string& entry, const std::string& needle) {
    SCOPED_TRACE(entry);
    expect_parse_error(raw_file(header_with(entry), d16), needle);
  };
  bad("[]", "not an object");
  bad("{\"shape\":[4],\"data_offsets\":[0,16]}", "no string 'dtype'");
  bad("{\"dtype\":\"F32\",\"data_offsets\":[0,16]}", "no 'shape' array");
  bad("{\"dtype\":\"F32\",\"shape\":[4]}", "data_offsets");
  bad("{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,8,16]}", "data_offsets");
  bad("{\"dtype\":\"Q4_0\",\"shape\":[4],\"data_offsets\":[0,16]}", "unknown dtype 'Q4_0'");
  bad("{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}", "non-negative integers");
  bad("{\"dtype\":\"F32\",\"shape\":[4.0],\"data_offsets\":[0,16]}", "non-negative integers");
  bad("{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,-16]}", "non-negative integers");
  bad("{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}", "out of order");
  bad("{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]}", "run past the data section");
  bad("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}", "run past the data section");
  bad("{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}", "needs 12 bytes");
  bad("{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,16]}", "too many elements");
  bad("{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,16]}", "too large");
  bad("{\"dtype\":\"F32\",\"shape\":[18446744073709551615],\"data_offsets\":[0,16]}", "too many elements");
  bad("{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}", "whole number of bytes");
  bad("{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[0,16]}", "needs 0 bytes");
}

TEST(Safetensors, RejectsOverlapsButAllowsGapsAndEmptyTensors) {
  const Bytes d = random_bytes(32, 15);
  auto two = [&](int b0, int e0, int b1, int e1) {
    const std::string h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(e0 - b0) + "],\"data_offsets\":[" +
                          std::to_string(b0) + "," + std::to_string(e0) + "]}," +
                          "\"b\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(e1 - b1) + "],\"data_offsets\":[" +
                          std::to_string(b1) + "," + std::to_string(e1) + "]}}";
    return raw_file(h, d);
  };
  expect_parse_error(two(0, 16, 8, 24), "overlap");
  expect_parse_error(two(8, 24, 0, 16), "overlap");
  expect_parse_error(two(0, 32, 4, 8), "overlap");
  expect_parse_error(two(0, 16, 0, 16), "overlap");
  EXPECT_NO_THROW(parse(two(0, 16, 16, 32)));
  EXPECT_NO_THROW(parse(two(16, 32, 0, 16)));
  EXPECT_NO_THROW(parse(two(0, 8, 24, 32)));   // a gap is harmless
  EXPECT_NO_THROW(parse(two(0, 32, 8, 8)));    // an empty tensor occupies no bytes
  const Bytes swapped = two(16, 32, 0, 16);
  const SafetensorsFile st = parse(swapped);
  EXPECT_EQ(st.tensors()[0].name, "b");  // data order
  EXPECT_EQ(st.tensors()[0].data + 16, st.tensors()[1].data);
}

TEST(Safetensors, MisalignedDataIsRefusedByView) {
  // Header of odd length: the F32 data starts at an odd address.
  std::string h = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  if ((8 + h.size()) % 2 == 0) h += ' ';
  const Bytes file = raw_file(h, random_bytes(8, 16));
  const SafetensorsFile st = parse(file);
  const SafetensorsTensor* x = st.find("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->nbytes, 8u);
  EXPECT_THROW(x->view(), Error);
}

// Random corruptions of a valid file must parse or throw ferry::Error, never crash (ASan/UBSan builds
// make this stronger; the libFuzzer target goes further).
TEST(Safetensors, SurvivesRandomCorruption) {
  const Bytes good = build_file({{"a", "F32", {2, 3}, random_bytes(24, 17)},
                                 {"b", "BF16", {5}, random_bytes(10, 18)},
                                 {"c", "F8_E5M2", {3}, random_bytes(3, 19)}},
                                {{"format", "pt"}});
  std::mt19937 rng(20);
  int n_parsed = 0, n_errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes b = good;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = uint8_t(rng());
    if (rng() % 4 == 0) b.resize(rng() % b.size());
    try {
      const SafetensorsFile st = parse(b);
      for (const auto& t : st.tensors()) {
        ASSERT_GE(t.data, b.data() + st.data_offset());
        ASSERT_LE(t.data + t.nbytes, b.data() + b.size());
      }
      ++n_parsed;
    } catch (const Error&) {
      ++n_errors;
    }
  }
  EXPECT_GT(n_parsed, 0);
  EXPECT_GT(n_errors, 0);
}

// The fuzz seed corpus doubles as a cross-check: its valid_* files were written by the Python safetensors
// library (reference/make_safetensors_corpus.py), its bad_* files must all be rejected.
TEST(Safetensors, FuzzCorpusFromPythonLibrary) {
  const std::string dir = test::source_dir() + "/tests/fuzz/corpus/safetensors";
  int n_valid = 0, n_bad = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const std::string text = test::read_file(entry.path().string());
    const Bytes b(text.begin(), text.end());
    if (name.rfind("valid_", 0) == 0) {
      EXPECT_NO_THROW(parse(b)) << name;
      ++n_valid;
    } else if (name.rfind("bad_", 0) == 0) {
      EXPECT_THROW(parse(b), Error) << name;
      ++n_bad;
    }
  }
  EXPECT_GE(n_valid, 5);
  EXPECT_GE(n_bad, 10);
  const std::string text = test::read_file(dir + "/valid_unsupported.safetensors");
  const Bytes unsupported_bytes(text.begin(), text.end());  // parse() keeps pointers into these bytes
  const SafetensorsFile st = parse(unsupported_bytes);
  ASSERT_TRUE(st.contains("f8"));
  EXPECT_THROW(st.find("f8"), Error);
  const std::string mixed = test::read_file(dir + "/valid_mixed.safetensors");
  const Bytes mixed_bytes(mixed.begin(), mixed.end());
  const SafetensorsFile m = parse(mixed_bytes);
  EXPECT_EQ(m.find("a")->dtype, DType::F16);
  EXPECT_EQ(m.find("b")->dtype, DType::BF16);
  EXPECT_EQ(m.find("c")->dtype, DType::I64);
  EXPECT_EQ(m.find("c")->view().ptr<int64_t>()[3], 3);  // torch.arange(4)
  EXPECT_EQ(m.metadata().at("format"), "pt");
}

// ---- the checked-in tiny models (reference/make_tiny_models.py) ----

std::string fixture_model(const std::string& name) { return test::source_dir() + "/tests/fixtures/models/" + name; }

// Mean and standard deviation of a tensor's values (F32 or BF16).
std::pair<double, double> stats(const SafetensorsTensor& t) {
  const Tensor v = t.view();
  double s = 0, s2 = 0;
  const int64_t n = v.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double x = v.dtype == DType::F32 ? v.ptr<float>()[i] : bf16_to_f32(v.ptr<uint16_t>()[i]);
    s += x;
    s2 += x * x;
  }
  const double mean = s / double(n);
  return {mean, std::sqrt(std::max(0.0, s2 / double(n) - mean * mean))};
}

TEST(SafetensorsModel, TinyLlamaSingleFile) {
  const SafetensorsModel m = SafetensorsModel::open(fixture_model("tiny-llama"));
  EXPECT_EQ(m.files().size(), 1u);
  EXPECT_EQ(m.config()["model_type"], "llama");
  EXPECT_EQ(m.config()["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(m.names().size(), 3u + 9u * 2u);  // embed, norm, lm_head + 9 per layer
  EXPECT_EQ(m.files()[0].metadata().at("format"), "pt");
  const SafetensorsTensor& q = m.get("model.layers.0.self_attn.q_proj.weight");
  const SafetensorsTensor& k = m.get("model.layers.1.self_attn.k_proj.weight");
  EXPECT_EQ(q.dtype, DType::F32);
  EXPECT_EQ(q.view().shape_str(), "(64, 64)");  // (n_heads*head_dim, dim)
  EXPECT_EQ(k.view().shape_str(), "(32, 64)");  // (n_kv_heads*head_dim, dim)
  EXPECT_EQ(m.get("model.layers.0.mlp.down_proj.weight").view().shape_str(), "(64, 160)");
  EXPECT_EQ(m.get("lm_head.weight").view().shape_str(), "(512, 64)");
  // The generator's init, read back: a misplaced offset or a wrong tensor breaks these.
  const auto [q_mean, q_std] = stats(q);
  EXPECT_NEAR(q_std, 1.0 / 8.0, 0.01);  // N(0, 1/fan_in), fan_in 64
  EXPECT_NEAR(q_mean, 0.0, 0.01);
  EXPECT_NEAR(stats(m.get("model.embed_tokens.weight")).second, 0.3, 0.01);
  EXPECT_NEAR(stats(m.get("lm_head.weight")).second, 0.25, 0.01);
  const auto [n_mean, n_std] = stats(m.get("model.norm.weight"));
  EXPECT_NEAR(n_mean, 1.0, 0.1);
  EXPECT_NEAR(n_std, 0.2, 0.07);
  EXPECT_EQ(m.find("model.layers.2.self_attn.q_proj.weight"), nullptr);
  EXPECT_THROW(m.get("nope"), Error);
}

TEST(SafetensorsModel, TinyQwen3Sharded) {
  const SafetensorsModel m = SafetensorsModel::open(fixture_model("tiny-qwen3"));
  EXPECT_GE(m.files().size(), 2u);
  EXPECT_EQ(m.config()["head_dim"], 32);
  EXPECT_EQ(m.config()["tie_word_embeddings"], true);
  EXPECT_EQ(m.names().size(), 2u + 11u * 2u);  // embed, norm + 11 per layer; tied: no lm_head
  EXPECT_EQ(m.find("lm_head.weight"), nullptr);
  const SafetensorsTensor& q = m.get("model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(q.dtype, DType::BF16);
  EXPECT_EQ(q.view().shape_str(), "(128, 64)");  // 4 heads × head_dim 32
  EXPECT_EQ(m.get("model.layers.1.self_attn.o_proj.weight").view().shape_str(), "(64, 128)");
  EXPECT_EQ(m.get("model.layers.0.self_attn.k_norm.weight").view().shape_str(), "(32)");
  EXPECT_NEAR(stats(q).second, 0.125, 0.01);
  EXPECT_NEAR(stats(m.get("model.layers.0.self_attn.q_norm.weight")).first, 1.0, 0.15);
  // Every tensor is found in the shard the index names.
  const auto index = nlohmann::json::parse(test::read_file(fixture_model("tiny-qwen3") + "/model.safetensors.index.json"));
  EXPECT_EQ(index["weight_map"].size(), m.names().size());
  for (const auto& [name, shard] : index["weight_map"].items()) {
    const SafetensorsTensor& t = m.get(name);
    bool in_shard = false;
    for (const auto& f : m.files())
      if (fs::path(f.name()).filename() == shard.get<std::string>()) in_shard = f.contains(name) && f.find(name) == &t;
    EXPECT_TRUE(in_shard) << name;
  }
}

// A scratch model folder: config.json plus the given files.
class ModelDir {
 public:
  explicit ModelDir(const std::string& name) : dir_(test::temp_path(name)) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write("config.json", "{\"model_type\": \"llama\"}");
  }
  void write(const std::string& file, const std::string& text) const {
    std::ofstream(dir_ + "/" + file, std::ios::binary) << text;
  }
  void write(const std::string& file, const Bytes& b) const {
    std::ofstream(dir_ + "/" + file, std::ios::binary).write(reinterpret_cast<const char*>(b.data()),
                                                              std::streamsize(b.size()));
  }
  void remove(const std::string& file) const { fs::remove(dir_ + "/" + file); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

void expect_open_error(const std::string& dir, const std::string& needle) {
  try {
    SafetensorsModel::open(dir);
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(SafetensorsModel, ShardValidation) {
  const ModelDir d("st_model_shards");
  d.write("a.safetensors", build_file({{"x", "F32", {2}, random_bytes(8, 21)}}));
  d.write("b.safetensors", build_file({{"y", "F32", {3}, random_bytes(12, 22)}}));
  d.write("model.safetensors.index.json", "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"b.safetensors\"}}");
  const SafetensorsModel m = SafetensorsModel::open(d.dir());
  EXPECT_EQ(m.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(m.get("y").nbytes, 12u);
  EXPECT_EQ(m.config()["model_type"], "llama");

  d.write("model.safetensors.index.json", "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"c.safetensors\"}}");
  expect_open_error(d.dir(), "shard c.safetensors named in model.safetensors.index.json is missing");
  d.write("model.safetensors.index.json", "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"a.safetensors\"}}");
  expect_open_error(d.dir(), "puts tensor 'y' in a.safetensors, which does not contain it");
  d.write("model.safetensors.index.json", "{\"weight_map\": {\"x\": \"../a.safetensors\"}}");
  expect_open_error(d.dir(), "not a plain file name");
  d.write("model.safetensors.index.json", "{\"weight_map\": {\"x\": 3}}");
  expect_open_error(d.dir(), "not a file name");
  d.write("model.safetensors.index.json", "{\"metadata\": {}}");
  expect_open_error(d.dir(), "no 'weight_map' object");
  d.write("model.safetensors.index.json", "{\"weight_map\": {");
  expect_open_error(d.dir(), "malformed JSON");

  d.write("b.safetensors", build_file({{"y", "F32", {3}, random_bytes(12, 22)}, {"x", "F32", {2}, random_bytes(8, 23)}}));
  d.write("model.safetensors.index.json", "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"b.safetensors\"}}");
  expect_open_error(d.dir(), "tensor 'x' is in two shards, a.safetensors and b.safetensors");

  d.write("b.safetensors", Bytes{1, 2, 3});
  expect_open_error(d.dir(), "too short");

  d.remove("model.safetensors.index.json");
  expect_open_error(d.dir(), "neither model.safetensors nor model.safetensors.index.json");
  d.write("model.safetensors", build_file({{"z", "BF16", {4}, random_bytes(8, 24)}}));
  EXPECT_EQ(SafetensorsModel::open(d.dir()).names(), (std::vector<std::string>{"z"}));
  d.write("config.json", "{\"model_type\": ");
  expect_open_error(d.dir(), "malformed JSON");
  d.remove("config.json");
  expect_open_error(d.dir(), "has no config.json");
  expect_open_error(d.dir() + "/model.safetensors", "not a directory");
}

}  // namespace
}  // namespace ferry
