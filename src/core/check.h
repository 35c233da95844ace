// Errors: every failure the user can cause (bad file, bad argument) is a ferry::Error carrying one clear
// line naming the problem. The CLI prints it and exits non-zero. Programming errors use FERRY_ASSERT.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace ferry {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ferry

// FERRY_CHECK(cond, "fmt {}", args...): throws ferry::Error with the formatted message when cond is false.
#define FERRY_CHECK(cond, ...)        \
  do {                                \
    if (!(cond)) ::ferry::fail(__VA_ARGS__); \
  } while (0)

// FERRY_ASSERT(cond): an internal invariant; violations are bugs, reported with file and line.
#define FERRY_ASSERT(cond)                                                                     \
  do {                                                                                         \
    if (!(cond)) ::ferry::fail("internal error: {} ({}:{})", #cond, __FILE__, __LINE__);       \
  } while (0)
