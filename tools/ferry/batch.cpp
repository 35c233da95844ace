// ferry batch -i requests.jsonl -o results.jsonl: an OpenAI Batch API file through the serving engine
// (server/batch_job.h), with a progress line over the requests and a throughput summary.
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "common_options.h"
#include "core/check.h"
#include "core/progress.h"
#include "server/batch_job.h"

namespace ferry::cli {

Runner add_batch(CLI::App& app) {
  struct Opts {
    ModelOptions model;
    ServingOptions serving;
    std::string input, output, model_name;
    bool no_prefix_cache = false;
  };
  auto o = std::make_shared<Opts>();
  o->serving.max_waiting = 4096;  // a batch queues everything it can; the engine still runs max_running at once
  o->model.add(app);
  app.add_option("-i,--input", o->input, "the requests: OpenAI Batch API JSONL (custom_id, method, url, body)")->required();
  app.add_option("-o,--output", o->output, "the results (JSONL, appended; a rerun skips the custom_ids already there)")
      ->required();
  app.add_option("--model-name", o->model_name, "the name a request's \"model\" may use (besides -m's and the file name)");
  app.add_option("--max-running", o->serving.max_running, "sequences in one step at most")->check(CLI::Range(1, 4096));
  app.add_option("--max-waiting", o->serving.max_waiting, "requests queued in the engine at once")->check(CLI::Range(0, 1 << 20));
  app.add_option("--max-step-tokens", o->serving.max_step_tokens, "token budget of one engine step")->check(CLI::Range(1, 1 << 20));
  app.add_option("--kv-tokens", o->serving.kv_tokens, "KV cache capacity in tokens (0: automatic)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  app.add_flag("--no-prefix-cache", o->no_prefix_cache, "do not reuse the KV blocks of equal prompt prefixes");
  return [o](const Env& env) {
    FERRY_CHECK(std::filesystem::is_regular_file(o->input), "batch: cannot read the input '{}'", o->input);
    const std::string path = resolve_model(o->model.model, env);
    o->serving.prefix_caching = !o->no_prefix_cache;
    ServingEngine engine(o->model.engine_options(path, env), o->serving);
    server::BatchJobOptions job;
    job.input_path = o->input;
    job.output_path = o->output;
    std::string file_name = std::filesystem::path(path).filename().string();
    if (file_name.ends_with(".gguf")) file_name.resize(file_name.size() - 5);
    for (const std::string& n : {o->model_name, o->model.model, file_name, path})
      if (!n.empty()) job.facts.names.push_back(n);
    job.facts.context = engine.info().context;
    job.facts.vocab_size = engine.info().vocab_size;
    server::learn_chat_template(engine, job.facts);
    std::unique_ptr<Progress> bar;
    const ProgressMode mode = progress_mode(o->model.quiet);
    const server::BatchSummary s = server::run_batch(engine, job, [&](int64_t done, int64_t total) {
      if (!bar) bar = std::make_unique<Progress>("batch", uint64_t(total),
                                                 progress_options(mode, ProgressUnit::kItems, "requests"));
      bar->set(uint64_t(done));
    });
    if (bar) bar->finish();
    engine.shutdown(false);
    std::fprintf(stderr,
                 "ferry batch: %lld lines: %lld succeeded, %lld failed, %lld already in %s | %lld prompt + %lld generated "
                 "tokens in %.2f s (%.1f generated tok/s, %.2f requests/s)\n",
                 (long long)s.lines, (long long)s.succeeded, (long long)s.failed, (long long)s.skipped, o->output.c_str(),
                 (long long)s.prompt_tokens, (long long)s.completion_tokens, s.seconds,
                 s.seconds > 0 ? double(s.completion_tokens) / s.seconds : 0.0,
                 s.seconds > 0 ? double(s.succeeded + s.failed) / s.seconds : 0.0);
    return s.failed > 0 ? 2 : 0;
  };
}

}  // namespace ferry::cli
