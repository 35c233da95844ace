// ferry bench: prompt processing (pp) and token generation (tg) speed, llama-bench style: pp N runs an
// N-token prompt from an empty cache; tg N generates N tokens one by one after a 1-token prompt. Each test
// is repeated and reported as mean ± standard deviation.
#include <cmath>
#include <cstdio>
#include <random>

#include "commands.h"
#include "common_options.h"

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

}  // namespace

Runner add_bench(CLI::App& app) {
  struct Opts {
    ModelOptions model;
    int n_prompt = 128, n_gen = 64, reps = 3;
  };
  auto o = std::make_shared<Opts>();
  o->model.add(app);
  app.add_option("-p,--n-prompt", o->n_prompt, "prompt tokens (0: skip)")->check(CLI::Range(0, 1 << 20));
  app.add_option("-n,--n-gen", o->n_gen, "generated tokens (0: skip)")->check(CLI::Range(0, 1 << 20));
  app.add_option("-r,--repetitions", o->reps, "repetitions per test")->check(CLI::Range(1, 1000));
  return [o] {
    EngineOptions eo = o->model.engine_options(resolve_model(o->model.model));
    if (eo.context == 0) eo.context = std::max(o->n_prompt, o->n_gen + 1) + 16;
    eo.max_step_tokens = std::max(eo.max_step_tokens, o->n_prompt);
    Engine engine(eo);
    const ModelInfo& i = engine.info();
    std::mt19937 rng(42);
    std::uniform_int_distribution<int32_t> tok(0, std::min(i.vocab_size, 32000) - 1);
    SamplingParams greedy;
    greedy.temperature = 0;

    std::printf("| %-28s | %10s | %8s | %-14s | %7s | %6s | %18s |\n", "model", "size", "params", "backend", "threads",
                "test", "t/s");
    std::printf("|%s|%s|%s|%s|%s|%s|%s|\n", std::string(30, '-').c_str(), std::string(12, '-').c_str(),
                std::string(10, '-').c_str(), std::string(16, '-').c_str(), std::string(9, '-').c_str(),
                std::string(8, '-').c_str(), std::string(20, '-').c_str());
    const auto row = [&](const std::string& test, const Stat& s) {
      std::string name = i.name.size() > 28 ? i.name.substr(0, 28) : i.name;
      std::printf("| %-28s | %6.1f MiB | %6.1f M | %-14s | %7d | %6s | %9.1f ± %6.1f |\n", name.c_str(),
                  double(i.weight_bytes) / (1 << 20), double(i.n_params) / 1e6, i.backend.c_str(),
                  o->model.threads, test.c_str(), s.mean, s.sd);
      std::fflush(stdout);
    };
    if (o->n_prompt > 0) {
      std::vector<double> rates;
      for (int r = 0; r <= o->reps; ++r) {  // the first run warms up and is not counted
        std::vector<int32_t> prompt(static_cast<size_t>(o->n_prompt));
        for (auto& t : prompt) t = tok(rng);
        engine.reset();
        const GenerateResult res = engine.generate(prompt, greedy, 0, nullptr);
        if (r > 0) rates.push_back(double(o->n_prompt) / res.prompt_seconds);
      }
      row("pp" + std::to_string(o->n_prompt), stats(rates));
    }
    if (o->n_gen > 0) {
      std::vector<double> rates;
      for (int r = 0; r <= o->reps; ++r) {
        const int32_t first[1] = {tok(rng)};
        engine.reset();
        // n_gen + 1 sampled tokens = n_gen decode steps after the 1-token prompt.
        const GenerateResult res = engine.generate(first, greedy, o->n_gen + 1, nullptr, false);
        if (r > 0) rates.push_back(double(res.tokens.size() - 1) / res.gen_seconds);
      }
      row("tg" + std::to_string(o->n_gen), stats(rates));
    }
    return 0;
  };
}

}  // namespace ferry::cli
