// A mixture-of-experts model file whose config disagrees with its tensors is one ferry::Error naming the problem,
// never a crash: top-k above the expert count, an expert count that does not match the router, a wrong expert size.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "fixtures/test_paths.h"
#include "model/model_file.h"

namespace ferry {
namespace {

// tiny-qwen3moe copied with config.json keys changed; returns the error message of open_model ("" when it opens).
std::string open_with(const std::string& tag, const nlohmann::json& changes) {
  namespace fs = std::filesystem;
  const fs::path src = test::source_dir() + "/tests/fixtures/models/tiny-qwen3moe";
  const fs::path dst = test::temp_path("moe-config-" + tag);
  fs::remove_all(dst);
  fs::copy(src, dst, fs::copy_options::recursive);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dst / "config.json"));
  cfg.merge_patch(changes);
  std::ofstream(dst / "config.json") << cfg.dump();
  try {
    open_model(dst.string());
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(MoeConfig, TheFixtureOpensWithItsExperts) {
  const ModelFile m = open_model(test::source_dir() + "/tests/fixtures/models/tiny-qwen3moe");
  EXPECT_EQ(m.config.n_experts, 8);
  EXPECT_EQ(m.config.n_experts_used, 3);
  EXPECT_EQ(m.config.expert_hidden_dim, 32);
  EXPECT_EQ(m.config.moe_norm, MoeNorm::Softmax);
  EXPECT_EQ(m.config.dense_layers, std::vector<int>{1});
  EXPECT_TRUE(m.config.is_moe_layer(0) && !m.config.is_moe_layer(1) && m.config.is_moe_layer(2));
}

TEST(MoeConfig, DisagreementsAreOneClearError) {
  EXPECT_NE(open_with("topk", {{"num_experts_per_tok", 9}}).find("9 experts per token with 8 experts"), std::string::npos);
  EXPECT_NE(open_with("count", {{"num_local_experts", 6}}).find("router"), std::string::npos);
  EXPECT_NE(open_with("size", {{"moe_intermediate_size", 48}}).find("48 hidden units"), std::string::npos);
  EXPECT_NE(open_with("zero", {{"num_local_experts", 0}}).find("needs experts"), std::string::npos);
  EXPECT_NE(open_with("only", {{"mlp_only_layers", {7}}}).find("mlp_only_layers"), std::string::npos);
}

}  // namespace
}  // namespace ferry
