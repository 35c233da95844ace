// core/progress.h: the line's text, one redrawn line on a terminal, throttled plain lines in a log, nothing quiet.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "core/progress.h"

namespace ferry {
namespace {

// Captures what a Progress writes, with a clock the test moves.
struct Capture {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  double t = 100.0;
  ~Capture() {
    std::fclose(f);
    std::free(buf);
  }
  ProgressOptions options(ProgressMode mode, ProgressUnit unit = ProgressUnit::kBytes) {
    ProgressOptions o = progress_options(mode, unit, "tensors");
    o.out = f;
    o.clock = [this] { return t; };
    return o;
  }
  std::string text() {
    std::fflush(f);
    return std::string(buf, len);
  }
};

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

TEST(Progress, LineShowsBarBytesRateAndEta) {
  const ProgressOptions o = progress_options(ProgressMode::kBar);
  const std::string line = progress_line("pull", o, 512ull << 20, 1024ull << 20, 2.0, 10);
  EXPECT_EQ(line, "pull [#####.....]  50%  512 MiB/1.00 GiB  256 MiB/s  ETA 2s");
  // 9 left at 2 per second: 4.5 s, shown rounded
  EXPECT_EQ(progress_line("x", progress_options(ProgressMode::kBar, ProgressUnit::kItems, "tensors"), 3, 12, 1.5, 0),
            "x  25%  3/12 tensors  2.0 tensors/s  ETA 5s");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_duration(125), "2m05s");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(Progress, TerminalRedrawsOneLine) {
  Capture c;
  {
    Progress p("load", 1000, c.options(ProgressMode::kBar));
    for (int i = 1; i <= 10; ++i) {
      c.t += 0.2;
      p.set(uint64_t(i) * 100);
    }
    p.finish();
  }
  const std::string out = c.text();
  EXPECT_EQ(count(out, "\n"), 1u) << out;  // one line, ended once
  EXPECT_GE(count(out, "\r"), 10u);
  EXPECT_NE(out.find("100%"), std::string::npos);
}

TEST(Progress, LogGetsAtMostATenthPerLineAndOneLast) {
  Capture c;
  {
    Progress p("load", 1000, c.options(ProgressMode::kLines));
    for (int i = 1; i <= 1000; ++i) {
      c.t += 0.01;  // 10 s in all: throttled to one line per second and per tenth
      p.set(uint64_t(i));
    }
  }  // the destructor ends it
  const std::string out = c.text();
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_LE(count(out, "\n"), 12u) << out;
  EXPECT_GE(count(out, "\n"), 5u) << out;
  EXPECT_NE(out.find("load: done"), std::string::npos) << out;
}

TEST(Progress, QuietWritesNothing) {
  Capture c;
  {
    Progress p("load", 10, c.options(ProgressMode::kQuiet));
    p.set(5);
    p.finish();
  }
  EXPECT_EQ(c.text(), "");
  EXPECT_EQ(progress_mode(true), ProgressMode::kQuiet);
}

}  // namespace
}  // namespace ferry
