// serve_bench: a load generator for `ferry serve` (any OpenAI-compatible /v1/completions server that accepts
// token-id prompts and vLLM's ignore_eos). N clients, one thread and one keep-alive connection each, send
// `--requests` requests in all; prints throughput, TTFT and inter-token latency percentiles, failures.
//
//   ./serve_bench --url http://127.0.0.1:8080 --clients 8 --requests 32 --input-len 32 --output-len 32 --stream
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "load_client.h"
#include "workload.h"

namespace {

using nlohmann::json;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * double(v.size() - 1);
  const size_t i = size_t(pos);
  const double f = pos - double(i);
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / double(v.size());
}

// The served model's name and context from GET /v1/models (empty name / 0 when unavailable).
std::pair<std::string, int> served_model(httplib::Client& client) {
  const httplib::Result res = client.Get("/v1/models");
  if (!res || res->status != 200) return {"", 0};
  const json j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || j["data"].empty()) return {"", 0};
  return {j["data"][0].value("id", std::string()), j["data"][0].value("max_model_len", 0)};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"serve_bench: load generator for an OpenAI-compatible server (ferry serve)"};
  std::string url = "http://127.0.0.1:8080", mix = "fixed", json_path, model;
  int clients = 8;
  ferry::bench::WorkloadOptions w;
  ferry::bench::ClientOptions c;
  bool stream = false;
  int timeout_s = 600;
  app.add_option("--url", url, "server base URL");
  app.add_option("--clients", clients, "concurrent clients (one thread and connection each)")->check(CLI::Range(1, 4096));
  app.add_option("--requests", w.n_requests, "requests in all")->check(CLI::Range(1, 1 << 24));
  app.add_option("--input-len", w.input_len, "prompt tokens (the mean with --mix sharegpt)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--output-len", w.output_len, "generated tokens (the mean with --mix sharegpt)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--mix", mix, "fixed, or sharegpt (seeded log-normal lengths around the means)")->check(CLI::IsMember({"fixed", "sharegpt"}));
  app.add_option("--seed", w.seed, "workload seed");
  app.add_option("--token-range", w.token_hi, "prompt token ids are drawn from [1000, N) (N <= 1000: [N/4, N), for tiny vocabularies)")->check(CLI::Range(2, 1 << 30));
  app.add_option("--model", model, "model name (default: the first of GET /v1/models)");
  app.add_option("--temperature", c.temperature, "sampling temperature");
  app.add_flag("--stream", stream, "stream (SSE): measures TTFT and inter-token latency");
  app.add_option("--extra-fields", c.extra_fields,
                 "a JSON object merged into every request's body, e.g. structured output: "
                 "'{\"response_format\":{\"type\":\"regex\",\"regex\":\"[a-z ]+\"}}'")
      ->check([](const std::string& s) {
        const auto j = nlohmann::json::parse(s, nullptr, false);
        return j.is_object() ? std::string() : std::string("--extra-fields: not a JSON object");
      });
  app.add_option("--timeout", timeout_s, "per-request read timeout in seconds");
  app.add_option("--json", json_path, "also write the figures to this JSON file");
  CLI11_PARSE(app, argc, argv);
  if (w.token_hi <= w.token_lo) w.token_lo = w.token_hi / 4;
  w.mix = mix == "sharegpt" ? ferry::bench::LengthMix::ShareGpt : ferry::bench::LengthMix::Fixed;
  c.stream = stream;

  httplib::Client probe(url);
  const auto [served_name, context] = served_model(probe);
  c.model = model.empty() ? served_name : model;
  w.max_total_len = context;
  const std::vector<ferry::bench::WorkItem> items = ferry::bench::make_workload(w);

  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::vector<ferry::bench::RequestResult> results;
  results.reserve(items.size());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&] {
      httplib::Client client(url);
      client.set_read_timeout(timeout_s, 0);
      client.set_write_timeout(60, 0);
      client.set_connection_timeout(30, 0);
      client.set_keep_alive(true);
      for (size_t k; (k = next.fetch_add(1)) < items.size();) {
        ferry::bench::RequestResult r = ferry::bench::send_request(client, items[k], c);
        std::lock_guard lock(mutex);
        results.push_back(std::move(r));
      }
    });
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<double> ttft, itl, latency, tpot;
  int64_t gen_tokens = 0, prompt_tokens = 0;
  int failures = 0;
  std::string first_error;
  for (const auto& r : results) {
    if (!r.ok) {
      if (failures++ == 0) first_error = r.error;
      continue;
    }
    ttft.push_back(r.ttft);
    latency.push_back(r.latency);
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
    if (r.completion_tokens > 1 && stream) tpot.push_back((r.latency - r.ttft) / (r.completion_tokens - 1));
    gen_tokens += r.completion_tokens;
    prompt_tokens += r.prompt_tokens;
  }
  const int ok = int(results.size()) - failures;
  std::printf("serve_bench: %s model=%s clients=%d requests=%zu mix=%s in=%d out=%d stream=%s\n", url.c_str(),
              c.model.c_str(), clients, results.size(), mix.c_str(), w.input_len, w.output_len, stream ? "yes" : "no");
  std::printf("  wall %.2f s | %d ok, %d failed | %.2f req/s | generated %lld tok (%.1f tok/s) | prompt %lld tok (%.1f tok/s)\n",
              wall, ok, failures, ok / wall, (long long)gen_tokens, gen_tokens / wall, (long long)prompt_tokens, prompt_tokens / wall);
  if (stream) {
    std::printf("  TTFT ms: p50 %.1f  p99 %.1f  mean %.1f\n", 1e3 * percentile(ttft, 50), 1e3 * percentile(ttft, 99), 1e3 * mean(ttft));
    std::printf("  ITL  ms: p50 %.2f  p99 %.2f  mean %.2f   (TPOT p50 %.2f)\n", 1e3 * percentile(itl, 50), 1e3 * percentile(itl, 99),
                1e3 * mean(itl), 1e3 * percentile(tpot, 50));
  }
  std::printf("  latency ms: p50 %.1f  p99 %.1f\n", 1e3 * percentile(latency, 50), 1e3 * percentile(latency, 99));
  if (failures) std::printf("  first failure: %s\n", first_error.c_str());
  if (!json_path.empty()) {
    const json out = {{"url", url}, {"model", c.model}, {"clients", clients}, {"requests", results.size()},
                      {"mix", mix}, {"input_len", w.input_len}, {"output_len", w.output_len}, {"stream", stream},
                      {"wall_s", wall}, {"ok", ok}, {"failed", failures}, {"requests_per_s", ok / wall},
                      {"generated_tokens", gen_tokens}, {"generated_tok_per_s", gen_tokens / wall},
                      {"prompt_tokens", prompt_tokens},
                      {"ttft_ms", {{"p50", 1e3 * percentile(ttft, 50)}, {"p99", 1e3 * percentile(ttft, 99)}, {"mean", 1e3 * mean(ttft)}}},
                      {"itl_ms", {{"p50", 1e3 * percentile(itl, 50)}, {"p99", 1e3 * percentile(itl, 99)}, {"mean", 1e3 * mean(itl)}}},
                      {"tpot_ms_p50", 1e3 * percentile(tpot, 50)},
                      {"latency_ms", {{"p50", 1e3 * percentile(latency, 50)}, {"p99", 1e3 * percentile(latency, 99)}}},
                      {"first_error", first_error}};
    std::ofstream(json_path) << out.dump(2) << "\n";
  }
  return failures == 0 ? 0 : 1;
}
