// ferry bench: prompt processing (pp) and token generation (tg) speed, llama-bench style: pp N runs an
// N-token prompt from an empty cache; tg N generates N tokens one by one after a 1-token prompt. Each test
// is repeated and reported as mean ± standard deviation. -d D (repeatable, or a list: -d 0,8192,32768) runs
// every test again after D tokens already in the KV cache ("tg128 @ d8192"; measure/bench_run.h).
//
// Each test is also placed on the roofline (src/measure/roofline.h: bytes moved and FLOPs per test): achieved
// GB/s and FLOP/s, arithmetic intensity, the roof's tok/s, the share of the roof reached and which ceiling
// binds. Ceilings: --ceilings GBPS,TFLOPS; else the H200 figures for cuda, or measured at start for cpu
// (src/measure/cpu_ceilings.h). --plot FILE.svg draws the tests (and --kernels FILE.json harness results).
//
// --spec oracle (this command only; measure/oracle_bench.h): the tg test runs plainly, then replayed by the oracle
// proposer at k = 1..--spec-k: tok/s, the verify step's cost as a multiple of a plain decode step, and how many
// positions' argmax changed between the plain decode and the verify steps.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <span>

#ifdef FERRY_HAS_CUDA
#include <cuda_runtime.h>
#endif

#include "backends/cpu/simd.h"
#include "commands.h"
#include "common_options.h"
#include "core/check.h"
#include "core/env.h"
#include "measure/bench_run.h"
#include "measure/cpu_ceilings.h"
#include "measure/oracle_bench.h"
#include "measure/roofline.h"
#include "measure/roofline_svg.h"

namespace ferry::cli {
namespace {

struct Stat {
  double mean = 0, sd = 0;
};
Stat stats(const std::vector<double>& v) {
  Stat s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / double(v.size() - 1)) : 0;
  return s;
}

// A rate in at most 9 characters: "1234.5", or "3.83e+08" past a million.
std::string compact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 1e6 ? "%.1f" : "%.3g", v);
  return buf;
}

// The name of CUDA device 0, or "" when there is none (or no CUDA in this build).
std::string cuda_device_name() {
#ifdef FERRY_HAS_CUDA
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) return p.name;
#endif
  return "";
}

// The roof for this run, and one line saying where it comes from.
Ceilings bench_ceilings(const std::string& given, const std::string& device, int threads, const Env& env) {
  if (!given.empty()) {
    Ceilings c = parse_ceilings(given);
    c.source += device == "cuda" ? " (device: " + cuda_device_name() + ")" : " (this CPU)";
    return c;
  }
  if (device == "cuda") {
    Ceilings c = h200_ceilings();
    const std::string name = cuda_device_name();
    c.source += "; device: " + name;
    if (name.find("H200") == std::string::npos) c.source += " (not an H200: pass --ceilings GBPS,TFLOPS for it)";
    return c;
  }
  return measure_cpu_ceilings(threads, resolve_simd_level(env.simd)).ceilings;
}

// The prompts of a --corpus file: blocks of text separated by lines that are exactly "%%".
std::vector<std::string> read_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FERRY_CHECK(in.good(), "--corpus {}: cannot read the file", path);
  std::vector<std::string> prompts(1);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "%%") {
      prompts.emplace_back();
    } else {
      prompts.back() += line + "\n";
    }
  }
  std::erase_if(prompts, [](const std::string& p) { return p.find_first_not_of(" \n\t") == std::string::npos; });
  FERRY_CHECK(!prompts.empty(), "--corpus {}: no prompt in it (prompts are separated by lines of %%)", path);
  return prompts;
}

struct CorpusRun {
  double tokens = 0, seconds = 0;
  GenerateResult total;  // target_steps, spec_proposed, spec_accepted summed; tokens: all of them
};

// Each corpus prompt as a user turn (the chat template where the model has one), n_gen tokens at most, greedy,
// stopping at end of generation; `reps` passes after one warm-up pass. With two engines (plain, speculative) each
// prompt runs on one and then the other, so a machine whose load changes slows both alike.
void run_corpus(std::span<Engine* const> engines, std::span<CorpusRun> runs, const std::vector<std::string>& prompts,
                int n_gen, int reps) {
  SamplingParams greedy;
  greedy.temperature = 0;
  for (int r = 0; r <= reps; ++r) {
    for (const std::string& p : prompts) {
      for (size_t e = 0; e < engines.size(); ++e) {
        Engine& engine = *engines[e];
        const bool chat = engine.has_chat_template();
        const std::vector<int32_t> ids =
            engine.tokenize(chat ? engine.apply_chat_template({{"user", p}}, true) : p, true, chat);
        engine.reset();
        const GenerateResult g = engine.generate(ids, greedy, n_gen, nullptr);
        if (r == 0) continue;
        CorpusRun& run = runs[e];
        run.tokens += double(g.tokens.size());
        run.seconds += g.gen_seconds;
        run.total.tokens.insert(run.total.tokens.end(), g.tokens.begin(), g.tokens.end());
        run.total.target_steps += g.target_steps;
        run.total.spec_proposed += g.spec_proposed;
        run.total.spec_accepted += g.spec_accepted;
      }
    }
  }
}

}  // namespace

Runner add_bench(CLI::App& app) {
  struct Opts {
    ModelOptions model;
    SpecCliOptions spec;
    std::string corpus;
    int n_prompt = 128, n_gen = 64, reps = 3;
    std::vector<int> depths = {0};
    std::string ceilings, plot;
    std::vector<std::string> kernels;
    std::string random, random_type = "bf16";
  };
  auto o = std::make_shared<Opts>();
  o->model.add(app);
  o->spec.add(app, true);
  app.add_option("--corpus", o->corpus, "instead of pp/tg: generate (greedy, -n tokens at most) after each prompt of "
                                        "this file (prompts separated by lines of %%; e.g. bench/spec/corpus.txt), "
                                        "and with --spec, the same without speculation and the speed-up");
  app.add_option("-p,--n-prompt", o->n_prompt, "prompt tokens (0: skip)")->check(CLI::Range(0, 1 << 20));
  app.add_option("-n,--n-gen", o->n_gen, "generated tokens (0: skip)")->check(CLI::Range(0, 1 << 20));
  app.add_option("-r,--repetitions", o->reps, "repetitions per test")->check(CLI::Range(1, 1000));
  app.add_option("-d,--n-depth", o->depths, "run the tests after this many tokens already in the KV cache (a prefill "
                                            "that is not timed); repeatable or a list, e.g. -d 0,8192,32768 "
                                            "(default 0)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--ceilings", o->ceilings,
                 "roofline ceilings GBPS,TFLOPS (default: the H200's 4300,779 for cuda; measured for cpu)");
  CLI::Option* random = app.add_option("--random", o->random,
                                       "no model file: a random-weight model of this shape (ferry gen's shapes), "
                                       "generated in memory, each --tp rank its own shard (same as -m random:SHAPE:TYPE)");
  app.add_option("--type", o->random_type, "--random's weight type: f32, f16, bf16, q8_0, q4_0, q4_1")->needs(random);
  CLI::Option* plot = app.add_option("--plot", o->plot, "write a roofline chart of the tests (SVG)");
  app.add_option("--kernels", o->kernels, "kernel results to add to the chart (JSON from a bench/kernels harness "
                                          "--json FILE; repeatable)")
      ->needs(plot);
  return [o](const Env& env) {
    FERRY_CHECK(o->random.empty() || o->model.model.empty(), "use either -m or --random");
    EngineOptions eo = o->model.engine_options(
        o->random.empty() ? resolve_model(o->model.model, env) : "random:" + o->random + ":" + o->random_type, env);
    const bool oracle = o->spec.spec == "oracle";  // bench only: not a parse_spec mode (measure/oracle_bench.h)
    FERRY_CHECK(!oracle || o->corpus.empty(), "--spec oracle replays the tg test; it does not run --corpus");
    if (!oracle) o->spec.apply(eo, [&](const std::string& m) { return resolve_model(m, env); });
    if (!o->corpus.empty()) {
      const std::vector<std::string> prompts = read_corpus(o->corpus);
      const auto report = [&](const char* label, const CorpusRun& c, bool speculative) {
        std::printf("corpus %-6s: %zu prompts x %d, %.0f tokens in %.2f s: %.1f tok/s%s\n", label, prompts.size(),
                    o->reps, c.tokens, c.seconds, c.seconds > 0 ? c.tokens / c.seconds : 0.0,
                    speculative ? spec_summary(c.total).c_str() : "");
        std::fflush(stdout);
      };
      const bool spec = eo.spec.mode != SpecMode::Off;
      EngineOptions off = eo;
      off.spec = {};
      Engine engine(eo);
      std::unique_ptr<Engine> plain_engine = spec ? std::make_unique<Engine>(off) : nullptr;
      std::vector<Engine*> engines = {&engine};
      if (spec) engines.insert(engines.begin(), plain_engine.get());
      std::vector<CorpusRun> runs(engines.size());
      run_corpus(engines, runs, prompts, o->n_gen, o->reps);
      if (spec) report("plain", runs[0], false);
      report(std::string(spec_mode_name(eo.spec.mode)).c_str(), runs.back(), spec);
      if (spec) {
        const CorpusRun &plain = runs[0], &c = runs[1];
        std::printf("speed-up: %.2fx generation tok/s; %s\n", (c.tokens / c.seconds) / (plain.tokens / plain.seconds),
                    plain.total.tokens == c.total.tokens ? "the same tokens" : "THE TOKENS DIFFER");
      }
      return 0;
    }
    // The context holds the deepest depth and the longest test (the KV cache is sized by it), with 16 tokens to spare.
    const int needed = bench_context_needed(o->n_prompt, o->n_gen, o->depths);
    FERRY_CHECK(eo.context == 0 || eo.context >= needed,
                "bench: -c {} cannot hold depth {} plus the tests (pp{}, tg{}); it needs -c {} or more", eo.context,
                *std::max_element(o->depths.begin(), o->depths.end()), o->n_prompt, o->n_gen, needed);
    if (eo.context == 0) eo.context = needed + 16;
    eo.max_step_tokens = std::max(eo.max_step_tokens, o->n_prompt);
    Engine engine(eo);
    const ModelInfo& i = engine.info();
    std::mt19937 rng(42);
    std::uniform_int_distribution<int32_t> tok(0, std::min(i.vocab_size, 32000) - 1);

    std::vector<KernelResult> kernels;  // read first: a bad file fails before the benchmark runs
    for (const std::string& path : o->kernels)
      for (KernelResult& k : read_kernel_results(path)) kernels.push_back(std::move(k));
    const bool gpu = o->model.device == "cuda";
    Ceilings ceil = bench_ceilings(o->ceilings, o->model.device, o->model.threads, env);
    if (gpu && eo.tp > 1 && o->ceilings.empty()) {  // --tp N: N GPUs each stream their shard of the weights
      ceil.bytes_per_s *= eo.tp;
      ceil.flops_per_s *= eo.tp;
      ceil.source += ", x " + std::to_string(eo.tp) + " GPUs";
    }
    const double flop_unit = gpu ? 1e12 : 1e9;  // TFLOP/s on the GPU, GFLOP/s on the CPU
    const RooflineModel rm = roofline_model(i, (int64_t(i.context) + eo.block_size - 1) / eo.block_size * eo.block_size);
    const int step_tokens = std::min(eo.max_step_tokens, i.context);
    std::printf("ceilings: %.1f GB/s, %.2f %s (%s)\n", ceil.bytes_per_s / 1e9, ceil.flops_per_s / flop_unit,
                gpu ? "TFLOP/s" : "GFLOP/s", ceil.source.c_str());
    // How the backend holds the weights and which ones the prefill GEMMs read (Backend::facts); on the CPU, the
    // kernels every matmul runs.
    for (const auto& [k, v] : i.facts) {
      if (k == "cuda.weight_bytes") {
        std::printf("weights on the device: %.1f MiB (the file's tensors: %.1f MiB)\n", std::atof(v.c_str()) / 1048576.0,
                    double(i.weight_bytes) / 1048576.0);
      } else if (k.rfind("cuda.", 0) == 0) {
        std::printf("%s: %s\n", k.c_str() + 5, v.c_str());
      } else if (k.rfind("cpu.", 0) == 0) {
        std::printf("%s: %s\n", k.c_str() + 4, v.c_str());
      }
    }
    std::printf("\n");

    std::printf("| %-28s | %10s | %8s | %-14s | %7s | %14s | %18s | %8s | %8s | %7s | %9s | %6s | %-7s |\n", "model",
                "size", "params", "backend", "threads", "test", "t/s", "GB/s", gpu ? "TFLOP/s" : "GFLOP/s", "FLOP/B",
                "roof t/s", "% roof", "bound");
    std::printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", std::string(30, '-').c_str(),
                std::string(12, '-').c_str(), std::string(10, '-').c_str(), std::string(16, '-').c_str(),
                std::string(9, '-').c_str(), std::string(16, '-').c_str(), std::string(20, '-').c_str(),
                std::string(10, '-').c_str(), std::string(10, '-').c_str(), std::string(9, '-').c_str(),
                std::string(11, '-').c_str(), std::string(8, '-').c_str(), std::string(9, '-').c_str());
    RooflinePlot chart;
    chart.title = "ferry bench: " + i.name + " on " + i.backend +
                  (gpu ? " (" + cuda_device_name() + ")"
                       : o->model.threads > 0 ? " (" + std::to_string(o->model.threads) + " threads)" : " (all threads)");
    chart.ceilings = ceil;
    const auto row = [&](const BenchTest& t, const Stat& s) {
      const TestCost cost = test_cost(rm, t);
      const RooflinePoint p = place_on_roofline(cost, cost.tokens / s.mean, ceil);
      std::string name = i.name.size() > 28 ? i.name.substr(0, 28) : i.name;
      std::printf("| %-28s | %6.1f MiB | %6.1f M | %-14s | %7d | %14s | %9.1f ± %6.1f | %8.2f | %8.2f | %7.1f | %9s | "
                  "%5.1f%% | %-7s |\n",
                  name.c_str(), double(i.weight_bytes) / (1 << 20), double(i.n_params) / 1e6, i.backend.c_str(),
                  o->model.threads, t.label().c_str(), s.mean, s.sd, p.bytes_per_s / 1e9, p.flops_per_s / flop_unit,
                  p.intensity, compact(p.roof_tokens_per_s).c_str(), 100 * p.fraction,
                  std::string(bound_name(p.bound)).c_str());
      std::fflush(stdout);
      chart.points.push_back({t.label(), p.intensity, p.flops_per_s, p.fraction, true});
    };
    const auto random_tokens = [&](int n) {
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (auto& t : v) t = tok(rng);
      return v;
    };
    // One test at one depth: o->reps timed runs after one warm-up run, each from a fresh fill of the depth.
    // Returns the last run (tg: tokens per target step and acceptance).
    const auto run_test = [&](const BenchTest& t, Stat& s) {
      std::vector<double> rates;
      BenchRun run;
      for (int r = 0; r <= o->reps; ++r) {
        const std::vector<int32_t> depth = random_tokens(t.depth);
        const std::vector<int32_t> test = random_tokens(t.kind == TestKind::Prompt ? t.n_tokens : 1);
        run = run_bench_test(engine, t, depth, test);
        if (r > 0) rates.push_back(run.tokens_per_s());
      }
      s = stats(rates);
      row(t, s);
      return run;
    };
    // --spec oracle: the plain row, then per k its tok/s, verify step cost and tokens, then the argmax changes.
    const auto run_oracle = [&](const BenchTest& t) {
      std::vector<int> ks;
      for (int k = 1; k <= o->spec.k; ++k) ks.push_back(k);
      std::vector<double> plain_rates;
      std::vector<std::vector<double>> rates(ks.size()), ratios(ks.size());
      std::vector<OracleRun> last;
      int64_t compared = 0, changed = 0;
      for (int r = 0; r <= o->reps; ++r) {
        const std::vector<int32_t> depth = random_tokens(t.depth);
        const std::vector<int32_t> test = random_tokens(1);
        BenchRun plain;
        last = run_oracle_tests(engine, t, depth, test, ks, plain);
        if (r == 0) continue;
        plain_rates.push_back(plain.tokens_per_s());
        for (size_t i = 0; i < ks.size(); ++i) {
          rates[i].push_back(last[i].run.tokens_per_s());
          ratios[i].push_back(last[i].step_ratio);
          compared += last[i].compared;
          changed += last[i].changed;
        }
      }
      const Stat plain = stats(plain_rates);
      row(t, plain);
      for (size_t i = 0; i < ks.size(); ++i) {
        const Stat rate = stats(rates[i]), ratio = stats(ratios[i]);
        std::printf("oracle k=%d: %.1f ± %.1f tok/s (%.2fx plain), verify step (%d rows) %.3f ± %.3f x a plain "
                    "step%s; %s\n",
                    ks[i], rate.mean, rate.sd, rate.mean / plain.mean, ks[i] + 1, ratio.mean, ratio.sd,
                    spec_summary(last[i].run.timed).c_str(),
                    last[i].changed == 0 ? "the same tokens" : "THE TOKENS DIFFER");
      }
      std::printf("argmax vs the plain decode: %lld of %lld compared positions changed (%.3f%%)%s\n",
                  static_cast<long long>(changed), static_cast<long long>(compared),
                  compared > 0 ? 100.0 * double(changed) / double(compared) : 0.0,
                  eo.batch_invariant ? " [--batch-invariant]" : "");
      std::fflush(stdout);
    };
    for (const int depth : o->depths) {
      Stat s;
      if (o->n_prompt > 0) run_test({TestKind::Prompt, o->n_prompt, step_tokens, depth}, s);
      if (o->n_gen > 0 && oracle) {
        run_oracle(BenchTest{TestKind::Generate, o->n_gen, 0, depth});
      } else if (o->n_gen > 0) {
        const BenchTest t{TestKind::Generate, o->n_gen, 0, depth};
        const BenchRun last = run_test(t, s);
        if (eo.spec.mode != SpecMode::Off)
          std::printf("speculation (%s)%s\n", std::string(spec_mode_name(eo.spec.mode)).c_str(),
                      spec_summary(last.timed).c_str());
        // --tp N on GPUs: the collectives' time per step (measured at load by every rank; engine/tp_setup) next to
        // the step time of this test (1 / tokens per second).
        std::string coll, coll_us;
        for (const auto& [k, v] : i.facts) {
          if (k == "tp.collectives") coll = v;
          if (k == "tp.collectives_us") coll_us = v;
        }
        if (!coll.empty()) {
          const double step_us = 1e6 / s.mean;
          std::printf("tensor-parallel %s: step %.1f us, of which collectives %s us (%.1f%%): %s\n",
                      t.label().c_str(), step_us, coll_us.c_str(), 100.0 * std::atof(coll_us.c_str()) / step_us,
                      coll.c_str());
        }
      }
    }
    if (!o->plot.empty()) {
      for (const KernelResult& k : kernels) {
        const RooflinePoint p = place_on_roofline({k.flops, k.bytes, 1}, k.seconds, ceil);
        chart.points.push_back({k.name, p.intensity, p.flops_per_s, p.fraction, false});
      }
      std::ofstream out(o->plot, std::ios::binary);
      FERRY_CHECK(out.good(), "--plot {}: cannot write the file", o->plot);
      out << roofline_svg(chart);
      out.close();
      FERRY_CHECK(out.good(), "--plot {}: writing the chart failed", o->plot);
      std::fprintf(stderr, "wrote %s (%zu tests, %zu kernels)\n", o->plot.c_str(),
                   chart.points.size() - kernels.size(), kernels.size());
    }
    return 0;
  };
}

}  // namespace ferry::cli
