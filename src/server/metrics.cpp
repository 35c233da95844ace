#include "server/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "server/openai_response.h"

namespace ferry::server {

namespace {

// Prometheus float text: integers without a fraction, others with enough digits, +Inf spelled out.
std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[40];
  if (v == std::floor(v) && std::abs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void header(std::string& out, const std::string& name, const std::string& help, const char* type) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void metric(std::string& out, const std::string& name, const std::string& help, const char* type, double v) {
  header(out, name, help, type);
  out += name + " " + num(v) + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value, int64_t times) {
  if (times <= 0 || std::isnan(value)) return;
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());  // first bound >= value
  std::lock_guard lock(mutex_);
  counts_[i] += times;
  sum_ += value * double(times);
  count_ += times;
}

std::vector<int64_t> Histogram::cumulative_counts() const {
  std::lock_guard lock(mutex_);
  std::vector<int64_t> c(counts_.size());
  int64_t acc = 0;
  for (size_t i = 0; i < counts_.size(); ++i) c[i] = acc += counts_[i];
  return c;
}

int64_t Histogram::count() const {
  std::lock_guard lock(mutex_);
  return count_;
}

double Histogram::sum() const {
  std::lock_guard lock(mutex_);
  return sum_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  const std::vector<int64_t> c = cumulative_counts();
  header(out, name, help, "histogram");
  for (size_t i = 0; i < bounds_.size(); ++i) out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(c[i]) + "\n";
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(c.back()) + "\n";
  std::lock_guard lock(mutex_);
  out += name + "_sum " + num(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

std::vector<double> ttft_buckets() { return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}; }
std::vector<double> itl_buckets() { return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5}; }
std::vector<double> latency_buckets() { return {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}; }

RateMeter::RateMeter(int window_seconds) : window_(std::max(1, window_seconds)), slots_(size_t(window_), {-1, 0}) {}

void RateMeter::add(int64_t n, std::chrono::steady_clock::time_point now) {
  const int64_t sec = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  std::lock_guard lock(mutex_);
  auto& slot = slots_[size_t(sec % window_)];
  if (slot.first != sec) slot = {sec, 0};
  slot.second += n;
}

double RateMeter::per_second(std::chrono::steady_clock::time_point now) const {
  const int64_t sec = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  std::lock_guard lock(mutex_);
  int64_t total = 0;
  for (const auto& [s, c] : slots_)
    if (s > sec - window_ && s <= sec) total += c;  // the window includes the current (partial) second
  return double(total) / double(window_);
}

ServerMetrics::ServerMetrics() : ttft_(ttft_buckets()), itl_(itl_buckets()), latency_(latency_buckets()) {}

void ServerMetrics::count_request(const std::string& route, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{route, status}];
}

void ServerMetrics::count_finish(FinishReason reason) {
  std::lock_guard lock(mutex_);
  ++finishes_[finish_reason_name(reason)];
}

void ServerMetrics::observe_itl(double seconds, int64_t n_tokens) {
  if (n_tokens <= 0) return;
  itl_.observe(seconds / double(n_tokens), n_tokens);
}

void ServerMetrics::add_tokens(int64_t prompt_tokens, int64_t generated_tokens, std::chrono::steady_clock::time_point now) {
  {
    std::lock_guard lock(mutex_);
    prompt_tokens_ += prompt_tokens;
    generated_tokens_ += generated_tokens;
  }
  if (generated_tokens > 0) generated_rate_.add(generated_tokens, now);
}

std::string ServerMetrics::render(const ServingStats& e, std::chrono::steady_clock::time_point now) const {
  std::string out;
  {
    std::lock_guard lock(mutex_);
    header(out, "ferry_http_requests_total", "HTTP responses by route and status code", "counter");
    for (const auto& [key, n] : requests_)
      out += "ferry_http_requests_total{route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
    header(out, "ferry_request_finish_total", "generation requests by finish reason (stop, length, abort = cancelled, error)", "counter");
    for (const char* reason : {"stop", "length", "abort", "error"}) {
      const auto it = finishes_.find(reason);
      out += std::string("ferry_request_finish_total{reason=\"") + reason + "\"} " + std::to_string(it == finishes_.end() ? 0 : it->second) + "\n";
    }
    metric(out, "ferry_server_prompt_tokens_total", "prompt tokens of requests that finished (server side)", "counter", double(prompt_tokens_));
    metric(out, "ferry_server_generation_tokens_total", "tokens sent to clients", "counter", double(generated_tokens_));
    metric(out, "ferry_streams_open", "streaming responses in progress", "gauge", double(streams_open_));
  }
  metric(out, "ferry_generation_tokens_per_second", "tokens sent to clients per second over the last 10 s", "gauge", generated_rate_.per_second(now));
  ttft_.render(out, "ferry_time_to_first_token_seconds", "time from request arrival to its first generated token");
  itl_.render(out, "ferry_inter_token_latency_seconds", "time between consecutive generated tokens of a request");
  latency_.render(out, "ferry_request_latency_seconds", "time from request arrival to its last token");

  metric(out, "ferry_running_sequences", "sequences in the running batch", "gauge", e.running);
  metric(out, "ferry_waiting_sequences", "requests waiting to be admitted", "gauge", e.waiting);
  metric(out, "ferry_kv_blocks_used", "KV cache blocks in use", "gauge", e.kv_blocks_used);
  metric(out, "ferry_kv_blocks_total", "KV cache blocks in all", "gauge", e.kv_blocks_total);
  metric(out, "ferry_kv_usage_ratio", "KV cache blocks in use / in all", "gauge", e.kv_blocks_total ? double(e.kv_blocks_used) / e.kv_blocks_total : 0.0);
  metric(out, "ferry_prefix_cache_hit_rate", "prompt tokens served from the prefix cache / prompt tokens admitted", "gauge", e.prefix_hit_rate());
  header(out, "ferry_engine_requests_total", "requests by engine outcome", "counter");
  out += "ferry_engine_requests_total{outcome=\"finished\"} " + std::to_string(e.requests_finished) + "\n";
  out += "ferry_engine_requests_total{outcome=\"cancelled\"} " + std::to_string(e.requests_cancelled) + "\n";
  out += "ferry_engine_requests_total{outcome=\"failed\"} " + std::to_string(e.requests_failed) + "\n";
  out += "ferry_engine_requests_total{outcome=\"rejected\"} " + std::to_string(e.requests_rejected) + "\n";
  metric(out, "ferry_preemptions_total", "sequences preempted (recomputed later) for lack of KV blocks", "counter", double(e.preemptions));
  metric(out, "ferry_prompt_tokens_total", "prompt tokens admitted by the engine", "counter", double(e.prompt_tokens));
  metric(out, "ferry_prompt_tokens_cached_total", "prompt tokens whose K/V came from the prefix cache", "counter", double(e.prompt_tokens_cached));
  metric(out, "ferry_generation_tokens_total", "tokens generated by the engine", "counter", double(e.generated_tokens));
  metric(out, "ferry_engine_steps_total", "engine steps run", "counter", double(e.steps));
  metric(out, "ferry_engine_busy_seconds_total", "time the engine spent running steps", "counter", e.busy_seconds);
  metric(out, "ferry_engine_busy_tokens_per_second", "generated tokens / busy seconds since start", "gauge",
         e.busy_seconds > 0 ? double(e.generated_tokens) / e.busy_seconds : 0.0);
  metric(out, "ferry_device_sampled_tokens_total", "tokens drawn by the sampler on the device (no logits to the host)",
         "counter", double(e.device_sampled_tokens));
  metric(out, "ferry_logits_host_bytes_total", "bytes of logits copied to the host for host-side sampling",
         "counter", double(e.logits_host_bytes));
  metric(out, "ferry_step_graph_replays_total", "engine steps replayed from a recorded step graph", "counter",
         double(e.graph_replays));
  metric(out, "ferry_spec_proposed_tokens_total", "speculative decoding: tokens proposed to verify steps", "counter",
         double(e.spec_proposed));
  metric(out, "ferry_spec_accepted_tokens_total", "speculative decoding: proposed tokens the target kept", "counter",
         double(e.spec_accepted));
  metric(out, "ferry_overlapped_steps_total",
         "engine steps launched before the previous step's tokens were postprocessed (asynchronous scheduling)",
         "counter", double(e.overlapped_steps));
  return out;
}

}  // namespace ferry::server
