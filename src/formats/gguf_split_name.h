// File names of a split GGUF, llama.cpp's gguf-split rule ("%s-%05d-of-%05d.gguf"): PREFIX-NNNNN-of-MMMMM.gguf,
// shard numbers counted from 1, both five digits (gguf-split stores split.count as a u16, so 65535 at most).
// "Llama-70B-Q4_K_M-00002-of-00003.gguf" is shard 2 of 3 of prefix "Llama-70B-Q4_K_M".
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ferry {

inline constexpr int kGgufMaxShards = 65535;  // split.count is a u16

struct GgufSplitName {
  std::string prefix;  // everything before "-NNNNN-of-MMMMM.gguf", a folder part included
  int number = 1;      // 1..count
  int count = 1;       // 1..65535
};

// The split name a path has; nullopt for any other name (a plain "model.gguf", a number out of range).
std::optional<GgufSplitName> parse_gguf_split_name(std::string_view path);
// PREFIX-NNNNN-of-MMMMM.gguf.
std::string gguf_split_name(std::string_view prefix, int number, int count);

}  // namespace ferry
