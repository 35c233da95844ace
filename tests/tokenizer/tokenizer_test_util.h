// Helpers shared by the tokenizer tests.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fixtures/test_paths.h"

namespace ferry::test {

struct GoldenCase {
  std::string text;
  std::vector<int32_t> ids;        // special-token text parsed
  std::vector<int32_t> ids_plain;  // special-token text tokenized as plain text
};

inline std::vector<GoldenCase> read_smollm2_golden() {
  std::vector<GoldenCase> cases;
  const std::string data = read_file(golden_dir() + "/tokenizer/smollm2.jsonl");
  size_t pos = 0;
  while (pos < data.size()) {
    size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    if (end > pos) {
      const auto j = nlohmann::json::parse(data.substr(pos, end - pos));
      cases.push_back({j.at("text").get<std::string>(), j.at("ids").get<std::vector<int32_t>>(),
                       j.at("ids_plain").get<std::vector<int32_t>>()});
    }
    pos = end + 1;
  }
  return cases;
}

}  // namespace ferry::test
