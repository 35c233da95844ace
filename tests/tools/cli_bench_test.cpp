// `ferry bench` with the roofline columns and `--plot`, on a tiny model written by `ferry gen`: the columns
// agree with the ceilings given, the chart is an SVG with one point per test and per kernel result, and bad
// --ceilings / --kernels end with one clear error.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fixtures/run_ferry.h"
#include "fixtures/test_paths.h"

namespace ferry {
namespace {

using test::run_ferry;

// The cells of the table row whose test column is `test` ("pp16"), trimmed; empty when there is none.
std::vector<std::string> row_cells(const std::string& output, const std::string& test) {
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| ", 0) != 0) continue;
    std::vector<std::string> cells;
    size_t pos = 1;
    for (size_t bar; (bar = line.find('|', pos)) != std::string::npos; pos = bar + 1) {
      std::string c = line.substr(pos, bar - pos);
      c.erase(0, c.find_first_not_of(' '));
      c.erase(c.find_last_not_of(' ') + 1);
      cells.push_back(c);
    }
    if (cells.size() > 5 && cells[5] == test) return cells;
  }
  return {};
}

class CliBench : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(test::temp_path("bench_tiny_" + std::to_string(getpid()) + ".gguf"));
    const test::FerryRun g = run_ferry("gen --shape tiny --type q8_0 -t 1 -o " + *model_);
    ASSERT_EQ(g.exit_code, 0) << g.output;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove(*model_);
    delete model_;
  }
  static std::string temp(const std::string& name) { return test::temp_path(std::to_string(getpid()) + "_" + name); }
  static std::string* model_;
};
std::string* CliBench::model_ = nullptr;

TEST_F(CliBench, ColumnsFollowTheCeilingsAndThePlotHasEveryPoint) {
  const std::string kernels = temp("kernels.json");
  std::ofstream(kernels) << R"({"kernels": [{"name": "k one", "flops": 1e9, "bytes": 1e8, "seconds": 0.01},
                                            {"name": "k two", "flops": 4e6, "bytes": 8e6, "seconds": 0.001}]})";
  const std::string svg_path = temp("roof.svg");
  // 100 GB/s and 1 TFLOP/s: the ridge is at 10 FLOP/byte.
  const test::FerryRun r = run_ferry("bench -m " + *model_ + " -p 16 -n 8 -r 1 -t 2 --ceilings 100,1 --plot " + svg_path +
                               " --kernels " + kernels);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ceilings: 100.0 GB/s, 1000.00 GFLOP/s (--ceilings 100,1"), std::string::npos) << r.output;
  for (const char* col : {"GB/s", "GFLOP/s", "FLOP/B", "roof t/s", "% roof", "bound"})
    EXPECT_NE(r.output.find(col), std::string::npos) << col;
  for (const std::string test : {"pp16", "tg8"}) {
    const std::vector<std::string> c = row_cells(r.output, test);
    ASSERT_EQ(c.size(), 13u) << test << " row missing in:\n" << r.output;
    const double tps = std::stod(c[6]), gbs = std::stod(c[7]), gflops = std::stod(c[8]), intensity = std::stod(c[9]);
    const double roof_tps = std::stod(c[10]), pct = std::stod(c[11]);
    ASSERT_GT(tps, 0) << test;
    // Intensity = FLOP/s over B/s (each printed to 0.01, the intensity to 0.1); the share of the roof is t/s
    // over the roof's t/s.
    ASSERT_GT(gbs, 0) << test;
    // Under the sanitizers the tiny model runs so slowly that GB/s prints as 0.0x: too few digits for the
    // ratio checks below (the release run makes them).
    if (gbs < 0.1) continue;
    EXPECT_NEAR(intensity, gflops / gbs, intensity * (0.006 / gbs + 0.006 / gflops) + 0.06) << test;
    EXPECT_NEAR(pct, 100 * tps / roof_tps, 0.01 * pct + 0.1) << test;
    // Memory-bound: % = GB/s of 100 GB/s; compute-bound: % = GFLOP/s of 1000 GFLOP/s.
    const std::string bound = c[12];
    ASSERT_TRUE(bound == "memory" || bound == "compute") << bound;
    EXPECT_EQ(bound == "memory", intensity < 10) << test;
    EXPECT_NEAR(pct, bound == "memory" ? gbs : gflops / 10, 0.02 * pct + 0.1) << test;
  }
  const std::string svg = test::read_file(svg_path);
  ASSERT_EQ(svg.rfind("<svg", 0), 0u) << svg.substr(0, 200);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_NE(svg.find(R"(<circle class="point e2e" data-name="pp16")"), std::string::npos);
  EXPECT_NE(svg.find(R"(<circle class="point e2e" data-name="tg8")"), std::string::npos);
  EXPECT_NE(svg.find(R"(<circle class="point kernel" data-name="k one")"), std::string::npos);
  EXPECT_NE(svg.find(R"(<circle class="point kernel" data-name="k two")"), std::string::npos);
  EXPECT_NE(svg.find(R"(<polyline class="roof")"), std::string::npos);
  size_t n_open = 0, n_close = 0;
  for (size_t p = 0; (p = svg.find("<circle", p)) != std::string::npos; ++p) ++n_open;
  for (size_t p = 0; (p = svg.find("</circle>", p)) != std::string::npos; ++p) ++n_close;
  EXPECT_EQ(n_open, 6u);  // 4 points + 2 legend dots
  EXPECT_EQ(n_close, 4u);
  std::filesystem::remove(kernels);
  std::filesystem::remove(svg_path);
}

TEST_F(CliBench, CpuCeilingsAreMeasuredWhenNotGiven) {
  const test::FerryRun r = run_ferry("bench -m " + *model_ + " -p 8 -n 0 -r 1 -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("measured on this CPU"), std::string::npos) << r.output;
  EXPECT_EQ(row_cells(r.output, "pp8").size(), 13u) << r.output;
  EXPECT_NE(r.output.find("\nmatmul: fast at "), std::string::npos) << "the kernels prefill ran:\n" << r.output;
  const test::FerryRun ref = run_ferry("bench -m " + *model_ + " -p 8 -n 0 -r 1 -t 2 --reference");
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  EXPECT_NE(ref.output.find("\nmatmul: reference: plain float loops"), std::string::npos) << ref.output;
}

TEST_F(CliBench, BadCeilingsAndKernelFilesFailClearly) {
  test::FerryRun r = run_ferry("bench -m " + *model_ + " -p 8 -n 0 -r 1 --ceilings 4300");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ferry: error: --ceilings '4300': expected GBPS,TFLOPS"), std::string::npos) << r.output;
  r = run_ferry("bench -m " + *model_ + " -p 8 -n 0 -r 1 --ceilings 0,5");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("must be a positive number"), std::string::npos) << r.output;
  const std::string bad = temp("bad_kernels.json");
  std::ofstream(bad) << R"([{"name": "x", "flops": 1, "bytes": 0, "seconds": 1}])";
  r = run_ferry("bench -m " + *model_ + " -p 8 -n 0 -r 1 --ceilings 1,1 --plot " + temp("never.svg") + " --kernels " +
                bad);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("\"bytes\" must be positive"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("| pp8"), std::string::npos) << "the file is checked before the benchmark runs";
  r = run_ferry("bench -m " + *model_ + " -p 8 -n 0 -r 1 --kernels " + bad);  // --kernels needs --plot
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--plot"), std::string::npos) << r.output;
  std::filesystem::remove(bad);
}

// -d: every test again after that many tokens in the KV cache, named as llama-bench names it, with the depth's K/V
// reads counted (FLOP/B falls: the KV bytes grow faster than the attention FLOPs); a -c too small is one error.
TEST_F(CliBench, DepthRowsCountTheCachedKeys) {
  const test::FerryRun r = run_ferry("bench -m " + *model_ + " -p 16 -n 8 -r 1 -t 2 --ceilings 100,1 -d 0,96 -d 48");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string test : {"pp16", "tg8", "pp16 @ d96", "tg8 @ d96", "pp16 @ d48", "tg8 @ d48"})
    ASSERT_EQ(row_cells(r.output, test).size(), 13u) << test << " row missing in:\n" << r.output;
  // The tiny model's tg8 streams ~0.1 MiB of weights a token; 96 tokens of f32 K/V (2 layers × 2 KV heads × 16
  // dims × 2 × 4 B = 512 B a token) add 48 KiB a token: the intensity drops.
  const double i0 = std::stod(row_cells(r.output, "tg8")[9]), i96 = std::stod(row_cells(r.output, "tg8 @ d96")[9]);
  EXPECT_LT(i96, i0) << r.output;
  const test::FerryRun small = run_ferry("bench -m " + *model_ + " -p 16 -n 8 -r 1 -t 2 -d 96 -c 100");
  EXPECT_EQ(small.exit_code, 1) << small.output;
  EXPECT_NE(small.output.find("ferry: error: bench: -c 100 cannot hold depth 96 plus the tests (pp16, tg8); it needs "
                              "-c 112 or more"),
            std::string::npos)
      << small.output;
}

// --corpus with --spec: both sides run every prompt, the speculative one prints its tokens per target step and
// acceptance, and the tokens are the same; `ferry run --spec` prints them too; a bad --spec is one clear error.
TEST_F(CliBench, CorpusAndRunWithSpeculation) {
  const std::string tiny = test::source_dir() + "/tests/fixtures/models/tiny-llama";
  const std::string corpus = test::source_dir() + "/bench/spec/corpus.txt";
  test::FerryRun r = run_ferry("bench -m " + tiny + " --corpus " + corpus + " --spec ngram -n 24 -r 1 -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("corpus plain : 6 prompts x 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tokens per target step"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the same tokens"), std::string::npos) << r.output;
  r = run_ferry("run -m " + tiny + " -p \"a b c a b c a b\" -n 12 --temp 0 -t 2 --spec ngram --spec-k 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokens per target step"), std::string::npos) << r.output;
  r = run_ferry("run -m " + tiny + " -p x -n 4 --spec eagle");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("'eagle' is not one of off, ngram, draft, draft:MODEL"), std::string::npos) << r.output;
}

// --spec oracle is ferry bench's (measure/oracle_bench.h): per k its tok/s, verify step cost and the same tokens,
// then the argmax line; ferry run / chat / serve refuse it (parse_spec knows no such mode).
TEST_F(CliBench, OracleIsBenchOnly) {
  const std::string tiny = test::source_dir() + "/tests/fixtures/models/tiny-llama";
  test::FerryRun r = run_ferry("bench -m " + tiny + " -p 0 -n 16 -r 1 -t 2 --spec oracle --spec-k 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* k : {"oracle k=1:", "oracle k=2:", "oracle k=3:"}) EXPECT_NE(r.output.find(k), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("x a plain step"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("THE TOKENS DIFFER"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("argmax vs the plain decode: 0 of "), std::string::npos) << r.output;
  for (const char* cmd : {"run -p x -n 4 -m ", "chat -m ", "serve -m "}) {
    r = run_ferry(std::string(cmd) + tiny + " --spec oracle");
    EXPECT_EQ(r.exit_code, 1) << cmd << r.output;
    EXPECT_NE(r.output.find("'oracle' is not one of off, ngram, draft, draft:MODEL"), std::string::npos)
        << cmd << r.output;
  }
}

}  // namespace
}  // namespace ferry
