// Options shared by the subcommands that load a model (run, chat, bench).
#pragma once

#include <CLI/CLI.hpp>
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
    o.batch_invariant = batch_invariant;
    o.on_load_progress = load_progress_bar(progress_mode(quiet));
    return o;
  }
};

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
