// Prometheus text of the server metrics: histogram bucket placement (le is inclusive, cumulative counts),
// counters by label, the engine snapshot, and the text format's line grammar.
#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <sstream>

#include "server/metrics.h"

namespace ferry::server {
namespace {

TEST(Metrics, HistogramBucketsAgainstCounting) {
  const std::vector<double> bounds = {0.01, 0.1, 1.0};
  Histogram h(bounds);
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.0, 2.0);
  std::vector<double> values = {0.01, 0.1, 1.0};  // exactly on bounds: counted in that bucket (le)
  for (int i = 0; i < 500; ++i) values.push_back(u(rng) * u(rng));
  double sum = 0;
  for (double v : values) {
    h.observe(v);
    sum += v;
  }
  const std::vector<int64_t> c = h.cumulative_counts();
  ASSERT_EQ(c.size(), bounds.size() + 1);
  for (size_t i = 0; i < bounds.size(); ++i) {
    int64_t expect = 0;
    for (double v : values) expect += v <= bounds[i];
    EXPECT_EQ(c[i], expect) << "le=" << bounds[i];
  }
  EXPECT_EQ(c.back(), int64_t(values.size()));
  EXPECT_EQ(h.count(), int64_t(values.size()));
  EXPECT_NEAR(h.sum(), sum, 1e-9 * sum);

  std::string text;
  h.render(text, "x_seconds", "help");
  EXPECT_NE(text.find("# TYPE x_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("x_seconds_bucket{le=\"0.1\"} " + std::to_string(c[1]) + "\n"), std::string::npos);
  EXPECT_NE(text.find("x_seconds_bucket{le=\"+Inf\"} " + std::to_string(values.size()) + "\n"), std::string::npos);
  EXPECT_NE(text.find("x_seconds_count " + std::to_string(values.size()) + "\n"), std::string::npos);
}

TEST(Metrics, ItlSpreadsCoalescedTokens) {
  ServerMetrics m;
  m.observe_itl(0.03, 3);  // three tokens 30 ms after the previous update: 10 ms each
  EXPECT_EQ(m.itl().count(), 3);
  EXPECT_NEAR(m.itl().sum(), 0.03, 1e-12);
  const auto c = m.itl().cumulative_counts();
  const auto b = itl_buckets();
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(c[i], b[i] >= 0.01 ? 3 : 0) << b[i];
}

TEST(Metrics, RateMeterWindow) {
  RateMeter r(10);
  const auto t0 = std::chrono::steady_clock::time_point(std::chrono::seconds(1000));
  r.add(50, t0);
  r.add(50, t0 + std::chrono::seconds(5));
  EXPECT_DOUBLE_EQ(r.per_second(t0 + std::chrono::seconds(5)), 10.0);
  EXPECT_DOUBLE_EQ(r.per_second(t0 + std::chrono::seconds(12)), 5.0);  // the first 50 left the window
  EXPECT_DOUBLE_EQ(r.per_second(t0 + std::chrono::seconds(30)), 0.0);
}

TEST(Metrics, RenderHasEverySeriesAndValidLines) {
  ServerMetrics m;
  m.count_request("chat", 200);
  m.count_request("chat", 200);
  m.count_request("completions", 429);
  m.count_finish(FinishReason::Stop);
  m.count_finish(FinishReason::Cancelled);
  m.observe_ttft(0.2);
  const auto now = std::chrono::steady_clock::now();
  m.add_tokens(12, 30, now);
  ServingStats s;
  s.running = 3;
  s.waiting = 2;
  s.kv_blocks_total = 100;
  s.kv_blocks_used = 25;
  s.prompt_tokens = 200;
  s.prompt_tokens_cached = 50;
  s.requests_cancelled = 4;
  s.device_sampled_tokens = 17;
  s.logits_host_bytes = 4096;
  s.graph_replays = 9;
  s.overlapped_steps = 5;
  const std::string text = m.render(s, now);
  for (const char* line : {"ferry_http_requests_total{route=\"chat\",status=\"200\"} 2\n",
                           "ferry_http_requests_total{route=\"completions\",status=\"429\"} 1\n",
                           "ferry_request_finish_total{reason=\"abort\"} 1\n",
                           "ferry_request_finish_total{reason=\"stop\"} 1\n",
                           "ferry_running_sequences 3\n", "ferry_waiting_sequences 2\n", "ferry_kv_blocks_used 25\n",
                           "ferry_kv_blocks_total 100\n", "ferry_kv_usage_ratio 0.25\n", "ferry_prefix_cache_hit_rate 0.25\n",
                           "ferry_engine_requests_total{outcome=\"cancelled\"} 4\n", "ferry_server_generation_tokens_total 30\n",
                           "ferry_time_to_first_token_seconds_count 1\n", "ferry_generation_tokens_per_second 3\n",
                           "ferry_device_sampled_tokens_total 17\n", "ferry_logits_host_bytes_total 4096\n",
                           "ferry_step_graph_replays_total 9\n", "ferry_overlapped_steps_total 5\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line;
  // Every line is a comment (# HELP / # TYPE) or `name{labels} value`.
  const std::regex sample(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [-+0-9.eInfa]+$)");
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
  }
  EXPECT_GT(n, 60);
}

}  // namespace
}  // namespace ferry::server
