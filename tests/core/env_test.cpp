// core/env.h: every variable parsed once, typed, bad values named; FERRY_CUDA_TUNE's keys; README.md's table of
// variables equal to the declarations; no other source file reads the environment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "core/check.h"
#include "core/cuda_tune.h"
#include "core/env.h"
#include "fixtures/test_paths.h"

namespace ferry {
namespace {

// Sets `name` to `value` for the scope (unset when value is null), restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

void expect_error_naming(const char* name, const char* value, const std::string& needle) {
  ScopedEnv e(name, value);
  try {
    (void)Env::read();
    ADD_FAILURE() << name << "=" << value << " accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
  }
}

TEST(Env, TypedValuesAndDefaults) {
  {
    ScopedEnv a("FERRY_TP_TIMEOUT", "17"), b("FERRY_TP_ALLREDUCE", "nccl"), c("FERRY_CUDA_PROFILE", "1"),
        d("FERRY_CUDA_PREFILL_BF16", "0"), t("FERRY_TP_CHILD", "2,4,9"), l("FERRY_LOG", "debug");
    const Env env = Env::read();
    EXPECT_EQ(env.tp_timeout_s, 17);
    EXPECT_EQ(env.tp_allreduce, TpAllReduce::kNccl);
    EXPECT_TRUE(env.cuda_profile);
    ASSERT_TRUE(env.cuda_prefill_bf16.has_value());
    EXPECT_FALSE(*env.cuda_prefill_bf16);
    ASSERT_TRUE(env.tp_child.has_value());
    EXPECT_EQ(env.tp_child->rank, 2);
    EXPECT_EQ(env.tp_child->world, 4);
    EXPECT_EQ(env.tp_child->fd, 9);
    EXPECT_TRUE(env.debug_log);
  }
  ScopedEnv a("FERRY_TP_TIMEOUT", nullptr), b("FERRY_CUDA_PROFILE", nullptr), c("FERRY_CUDA_TUNE", nullptr);
  const Env env = Env::read();
  EXPECT_EQ(env.tp_timeout_s, 300);
  EXPECT_FALSE(env.cuda_profile);
  EXPECT_EQ(env.cuda_tune.str(), CudaTune{}.str());
}

TEST(Env, HubVariablesAreReadAsGiven) {
  ScopedEnv a("HF_HOME", "/x/hf"), b("HF_HUB_CACHE", nullptr), c("HF_TOKEN", "hf_abc"), d("HF_ENDPOINT", "http://127.0.0.1:1");
  const Env env = Env::read();
  EXPECT_EQ(env.hub.hf_home.value_or(""), "/x/hf");
  EXPECT_FALSE(env.hub.hf_hub_cache.has_value());
  EXPECT_EQ(env.hub.hf_token.value_or(""), "hf_abc");
  EXPECT_EQ(env.hub.hf_endpoint.value_or(""), "http://127.0.0.1:1");
}

TEST(Env, BadValuesNameTheVariable) {
  for (const char* bad : {"yes", "2", "true", " 1"}) expect_error_naming("FERRY_CUDA_STAMPS", bad, "FERRY_CUDA_STAMPS");
  expect_error_naming("FERRY_TP_TIMEOUT", "0", "FERRY_TP_TIMEOUT");
  expect_error_naming("FERRY_TP_TIMEOUT", "12s", "FERRY_TP_TIMEOUT");
  expect_error_naming("FERRY_TP_ALLREDUCE", "fast", "FERRY_TP_ALLREDUCE");
  expect_error_naming("FERRY_SIMD", "neon", "FERRY_SIMD");
  expect_error_naming("FERRY_LOG", "verbose", "FERRY_LOG");
  expect_error_naming("FERRY_TP_CHILD", "1,1,3", "FERRY_TP_CHILD");
  expect_error_naming("FERRY_TP_CHILD", "1,2", "FERRY_TP_CHILD");
  expect_error_naming("FERRY_CUDA_TUNE", "matvec=v5", "matvec=v5");
}

TEST(CudaTune, ParsesEveryKeyAndRejectsTheRest) {
  const CudaTune t = CudaTune::parse("gemm=cublas,skinny=wgmma,matvec=tiled,ring=0,ring_half=2,act_levels=2,peer=flags");
  EXPECT_EQ(t.gemm, GemmTune::kCublas);
  EXPECT_EQ(t.skinny, SkinnyTune::kWgmma);
  EXPECT_EQ(t.matvec, MatvecTune::kTiled);
  EXPECT_EQ(t.ring_quant, 0);
  EXPECT_EQ(t.ring_half, 2);
  EXPECT_EQ(t.act_levels, 2);
  EXPECT_EQ(t.peer, PeerTune::kFlags);
  EXPECT_EQ(CudaTune::parse(t.str()).str(), t.str());  // str() round-trips
  EXPECT_EQ(CudaTune::parse("").str(), CudaTune{}.str());
  for (const char* bad : {"ring=17", "ring=-1", "ring=x", "act_levels=3", "gemm", "fused_qkv=0", "matvec=10"})
    EXPECT_THROW(CudaTune::parse(bad), Error) << bad;
}

// README.md's table (between the env-table markers) names exactly the declared variables, and every FERRY_ variable
// README sets anywhere (NAME=value) is declared: README and core/env.h cannot drift apart. At most 15 are ferry's
// own (FERRY_*); the others must be the standard names of huggingface_hub (and the XDG/HOME it falls back to),
// read as that tool reads them, so the cap cannot be dodged by a prefix.
TEST(Env, ReadmeListsExactlyTheDeclarations) {
  std::ifstream in(test::source_dir() + "/README.md");
  ASSERT_TRUE(in) << "README.md not found";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  const size_t begin = readme.find("<!-- env-table:begin -->"), end = readme.find("<!-- env-table:end -->");
  ASSERT_NE(begin, std::string::npos);
  ASSERT_NE(end, std::string::npos);
  std::set<std::string> table, declared;
  const std::string rows = readme.substr(begin, end - begin);
  const std::regex row(R"(\n\| `([A-Z][A-Z0-9_]+)`)");
  for (auto it = std::sregex_iterator(rows.begin(), rows.end(), row); it != std::sregex_iterator(); ++it)
    table.insert((*it)[1]);
  for (const EnvVarInfo& v : env_variables()) declared.insert(std::string(v.name));
  EXPECT_EQ(table, declared);
  const std::regex set_somewhere(R"((^|[^A-Z_D-])(FERRY_[A-Z0-9_]+)=)");
  for (auto it = std::sregex_iterator(readme.begin(), readme.end(), set_somewhere); it != std::sregex_iterator(); ++it)
    EXPECT_TRUE(declared.count((*it)[2])) << (*it)[2] << " is set in README.md but not declared in core/env.h";
  const std::set<std::string> foreign_allowed = {"HF_HOME", "HF_HUB_CACHE", "HF_TOKEN", "HF_ENDPOINT",
                                                  "XDG_CACHE_HOME", "HOME"};
  size_t own = 0;
  for (const std::string& name : declared) {
    if (name.rfind("FERRY_", 0) == 0) {
      ++own;
    } else {
      EXPECT_TRUE(foreign_allowed.count(name)) << name << " is neither FERRY_* nor a standard Hugging Face name";
    }
  }
  EXPECT_LE(own, 15u);
}

// Only core/env.cpp reads the process environment; everything else gets the Env passed down.
TEST(Env, OnlyCoreEnvReadsTheEnvironment) {
  namespace fs = std::filesystem;
  for (const char* dir : {"src", "tools", "include"}) {
    for (const auto& e : fs::recursive_directory_iterator(test::source_dir() + "/" + dir)) {
      if (!e.is_regular_file()) continue;
      const std::string p = e.path().string();
      if (p.size() >= 12 && p.substr(p.size() - 12) == "core/env.cpp") continue;
      std::ifstream f(p);
      std::stringstream s;
      s << f.rdbuf();
      EXPECT_EQ(s.str().find("getenv("), std::string::npos) << p << " reads the environment";
    }
  }
}

}  // namespace
}  // namespace ferry
