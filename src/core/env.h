// Every environment variable ferry reads is declared here, and read only through this struct.
#pragma once

#include <optional>
#include <string>

namespace ferry {

struct Env {
  // FERRY_SIMD: force a CPU SIMD level for the fast kernels ("scalar", "avx2", "avx512"); unset = best.
  std::optional<std::string> simd;
  // FERRY_MODELS_DIR: where `ferry run` looks for the default model (default: <repo>/models or ./models).
  std::optional<std::string> models_dir;
  // FERRY_LOG: "debug" prints per-step diagnostics to stderr.
  std::optional<std::string> log;
  // FERRY_TESTDATA: the shared test-data folder for tests (default: ../shared/testdata from the repo).
  std::optional<std::string> testdata;
  // FERRY_SOURCE_DIR: where tests find the repository (default: the path they were built from; the device
  // script sets it because binaries built here run from another folder there).
  std::optional<std::string> source_dir;

  static Env read();  // reads the process environment once; pass the result down
};

}  // namespace ferry
