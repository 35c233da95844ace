// env_switch: the on/off variables (FERRY_CUDA_PROFILE, FERRY_CUDA_SAMPLING) accept exactly "1" and "0".
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "core/check.h"
#include "core/env.h"

namespace ferry {
namespace {

TEST(EnvSwitch, OneZeroUnsetAndAnythingElse) {
  EXPECT_TRUE(env_switch(std::string("1"), "FERRY_X", false));
  EXPECT_FALSE(env_switch(std::string("0"), "FERRY_X", true));
  EXPECT_TRUE(env_switch(std::nullopt, "FERRY_X", true));
  EXPECT_FALSE(env_switch(std::nullopt, "FERRY_X", false));
  for (const char* bad : {"", "yes", "2", "true", " 1"}) {
    try {
      env_switch(std::string(bad), "FERRY_X", false);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("FERRY_X"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ferry
