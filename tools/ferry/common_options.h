// Options shared by the subcommands that load a model (run, chat, bench, serve, score, batch).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "core/progress.h"
#include "ferry/engine.h"
#include "load_progress_bar.h"

namespace ferry::cli {

struct ModelOptions {
  std::string model;
  std::string device = "cpu";
  int threads = 0;
  int context = 0;
  bool reference = false;
  int tp = 1;
  int ep = 1;
  bool batch_invariant = false;
  bool quiet = false;

  void add(CLI::App& app) {
    app.add_option("-m,--model", model, "model: a .gguf file, a Hugging Face folder, org/repo[@REVISION][:QUANT] (from "
                                        "the Hugging Face cache; `ferry pull` fetches it), or "
                                        "random:SHAPE[:TYPE[:SEED[:INIT]]] (random weights made in memory; INIT flat "
                                        "or peaked) (default: SmolLM2-135M-Instruct Q4_1)");
    app.add_flag("-q,--quiet", quiet, "no progress lines while the model loads");
    app.add_option("--device", device, "cpu")->check(CLI::IsMember({"cpu", "cuda"}));
    app.add_option("-t,--threads", threads, "CPU threads (0: all)")->check(CLI::Range(0, 1024));
    app.add_option("-c,--ctx", context, "context size in tokens (0: min(model's, 4096))")->check(CLI::Range(0, 1 << 24));
    app.add_flag("--reference", reference, "use the reference kernels (plain loops; slow, exact)");
    app.add_option("--tp", tp, "tensor-parallel ranks (cuda: one process per GPU, started here; cpu: threads; "
                               "under mpirun: one rank per process, N = the number of processes)")
        ->check(CLI::Range(1, 64));
    app.add_option("--ep", ep, "expert-parallel ranks for a mixture of experts (cpu: threads; under mpirun: one rank "
                               "per process): each rank holds E/N whole experts, the rest is replicated; not with "
                               "--tp above 1")
        ->check(CLI::Range(1, 64));
    app.add_flag("--batch-invariant", batch_invariant,
                 "cuda: a row's result does not depend on the rest of the batch (one GEMM kernel for every token "
                 "count, fixed attention splits; slower decode). The CPU kernels are batch-invariant always");
  }
  EngineOptions engine_options(const std::string& resolved_model, const Env& env) const {
    EngineOptions o;
    o.env = env;
    o.model_path = resolved_model;
    o.device = device;
    o.n_threads = threads;
    o.context = context;
    o.kernels = reference ? KernelSet::Reference : KernelSet::Fast;
    o.tp = tp;
    o.ep = ep;
    o.batch_invariant = batch_invariant;
    o.on_load_progress = load_progress_bar(progress_mode(quiet));
    return o;
  }
};

// Speculative decoding (run, chat, bench, serve): --spec, --spec-k, --draft.
struct SpecCliOptions {
  std::string spec = "off";
  int k = 4;
  std::string draft;
  // bench: `ferry bench` also takes oracle (measure/oracle_bench.h), which it handles itself: parse_spec refuses it.
  void add(CLI::App& app, bool bench = false) {
    app.add_option("--spec", spec, std::string("speculative decoding: off, ngram (prompt lookup), draft (with --draft), "
                                               "draft:MODEL (a smaller model with the same tokenizer); the same tokens "
                                               "as without") +
                                       (bench ? "; oracle: the tg test replayed by its own greedy output, k = 1.."
                                                "--spec-k (the verify step's cost and the ceiling)"
                                              : ""));
    app.add_option("--spec-k", k, "most tokens proposed per step (adapts below it)")->check(CLI::Range(1, kMaxSpecTokens));
    app.add_option("--draft", draft, "the draft model of --spec draft (the forms of -m)");
  }
  // Sets o.spec; resolve turns a model argument into its path (resolve_model).
  template <typename Resolve>
  void apply(EngineOptions& o, const Resolve& resolve) const {
    o.spec = parse_spec(spec, k, draft);
    if (o.spec.mode == SpecMode::Draft) o.spec.draft_model = resolve(o.spec.draft_model);
  }
};

// " | speculation: 2.41 tokens per target step, 71.3% of 812 proposals kept" (empty without proposals).
inline std::string spec_summary(const GenerateResult& r) {
  if (r.spec_proposed == 0 && r.target_steps == 0) return {};
  char buf[160];
  std::snprintf(buf, sizeof buf, " | %.2f tokens per target step, %.1f%% of %lld proposals kept",
                r.target_steps > 0 ? double(r.tokens.size()) / double(r.target_steps) : 0.0,
                r.spec_proposed > 0 ? 100.0 * double(r.spec_accepted) / double(r.spec_proposed) : 0.0,
                static_cast<long long>(r.spec_proposed));
  return buf;
}

struct SamplingOptions {
  SamplingParams params;
  void add(CLI::App& app) {
    app.add_option("--temp", params.temperature, "temperature (0: greedy)");
    app.add_option("--top-k", params.top_k, "top-k (0: off)");
    app.add_option("--top-p", params.top_p, "top-p (1: off)");
    app.add_option("--min-p", params.min_p, "min-p (0: off)");
    app.add_option("--repeat-penalty", params.repetition_penalty, "repetition penalty (1: off)");
    app.add_option("--presence-penalty", params.presence_penalty, "presence penalty (0: off)");
    app.add_option("--frequency-penalty", params.frequency_penalty, "frequency penalty (0: off)");
    app.add_option("--repeat-last-n", params.penalty_last_n, "penalty window in tokens (-1: all)");
    app.add_option("-s,--seed", params.seed, "random seed (same seed, same text)");
  }
};

}  // namespace ferry::cli
