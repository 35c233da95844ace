#include "core/env.h"

#include <cstdlib>

namespace ferry {
namespace {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

}  // namespace

Env Env::read() {
  Env e;
  e.simd = get("FERRY_SIMD");
  e.models_dir = get("FERRY_MODELS_DIR");
  e.log = get("FERRY_LOG");
  e.testdata = get("FERRY_TESTDATA");
  e.source_dir = get("FERRY_SOURCE_DIR");
  return e;
}

}  // namespace ferry
