// Prometheus text exposition (format 0.0.4) of what the server measures itself (requests by status, time to
// first token, inter-token latency, request latency, tokens) plus the engine's ServingStats snapshot.
// Every method is thread-safe (HTTP worker threads record, GET /metrics renders).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"  // ferry::Error, which serving.h uses
#include "ferry/serving.h"

namespace ferry::server {

// A cumulative histogram: counts per upper bound (le), plus +Inf, sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending, finite
  void observe(double value, int64_t times = 1);
  // Appends "# HELP", "# TYPE" and the _bucket/_sum/_count lines.
  void render(std::string& out, const std::string& name, const std::string& help) const;
  std::vector<int64_t> cumulative_counts() const;  // one per bound, then +Inf
  int64_t count() const;
  double sum() const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // counts_[i]: observations in (bounds_[i-1], bounds_[i]]; last: above all
  double sum_ = 0;
  int64_t count_ = 0;
  mutable std::mutex mutex_;
};

// Seconds buckets: TTFT from 5 ms to 60 s, inter-token latency from 1 ms to 2.5 s.
std::vector<double> ttft_buckets();
std::vector<double> itl_buckets();
std::vector<double> latency_buckets();

// Events counted over a sliding window of whole seconds (generated tokens per second, as seen by clients).
class RateMeter {
 public:
  explicit RateMeter(int window_seconds = 10);
  void add(int64_t n, std::chrono::steady_clock::time_point now);
  double per_second(std::chrono::steady_clock::time_point now) const;

 private:
  int window_;
  std::vector<std::pair<int64_t, int64_t>> slots_;  // (epoch second, count), one per second mod window
  mutable std::mutex mutex_;
};

class ServerMetrics {
 public:
  ServerMetrics();
  // One HTTP response: route ("chat", "completions", "models", "health", "metrics", "other"), status code.
  void count_request(const std::string& route, int status);
  void count_finish(FinishReason reason);
  void observe_ttft(double seconds) { ttft_.observe(seconds); }
  // `n_tokens` tokens arrived `seconds` after the previous update: each token's latency is seconds / n.
  void observe_itl(double seconds, int64_t n_tokens);
  void observe_request_latency(double seconds) { latency_.observe(seconds); }
  void add_tokens(int64_t prompt_tokens, int64_t generated_tokens, std::chrono::steady_clock::time_point now);
  void stream_started() { std::lock_guard lock(mutex_); ++streams_open_; }
  void stream_ended() { std::lock_guard lock(mutex_); --streams_open_; }

  // The whole exposition text, the engine's snapshot included.
  std::string render(const ServingStats& engine, std::chrono::steady_clock::time_point now) const;

  const Histogram& ttft() const { return ttft_; }
  const Histogram& itl() const { return itl_; }

 private:
  Histogram ttft_, itl_, latency_;
  RateMeter generated_rate_;
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;  // (route, status) -> count
  std::map<std::string, int64_t> finishes_;                  // finish reason -> count
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  int64_t streams_open_ = 0;
};

}  // namespace ferry::server
