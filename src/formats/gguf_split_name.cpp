#include "formats/gguf_split_name.h"

#include <fmt/format.h>

namespace ferry {
namespace {

constexpr std::string_view kSuffix = ".gguf";
constexpr size_t kDigits = 5;

// Five ASCII digits at s[at..at+5) as a number; -1 when they are not.
int five_digits(std::string_view s, size_t at) {
  int v = 0;
  for (size_t i = at; i < at + kDigits; ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

}  // namespace

std::optional<GgufSplitName> parse_gguf_split_name(std::string_view path) {
  // "-NNNNN-of-MMMMM.gguf" is 1 + 5 + 4 + 5 + 5 = 20 bytes; the prefix is at least one more.
  constexpr size_t kTail = 1 + kDigits + 4 + kDigits + kSuffix.size();
  if (path.size() <= kTail || path.substr(path.size() - kSuffix.size()) != kSuffix) return std::nullopt;
  const size_t at = path.size() - kTail;
  if (path[at] != '-' || path.substr(at + 1 + kDigits, 4) != "-of-") return std::nullopt;
  const int number = five_digits(path, at + 1), count = five_digits(path, at + 1 + kDigits + 4);
  if (number < 1 || count < 1 || count > kGgufMaxShards || number > count) return std::nullopt;
  const std::string_view prefix = path.substr(0, at);
  if (prefix.back() == '/') return std::nullopt;  // "dir/-00001-of-00002.gguf": no name
  return GgufSplitName{std::string(prefix), number, count};
}

std::string gguf_split_name(std::string_view prefix, int number, int count) {
  return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, number, count);
}

}  // namespace ferry
