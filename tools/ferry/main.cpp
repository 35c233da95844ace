#include <cstdio>
#include <exception>
#include <map>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry: an LLM inference engine (CPU now; CUDA, batching and serving next)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ferry 0.1.0");
  std::map<CLI::App*, ferry::cli::Runner> runners;
  const auto add = [&](const char* name, const char* help, ferry::cli::Runner (*reg)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    runners[sub] = reg(*sub);
  };
  add("run", "generate text from a prompt", ferry::cli::add_run);
  add("chat", "interactive multi-turn chat through the model's chat template", ferry::cli::add_chat);
  add("inspect", "print a model's architecture, hyperparameters and tensors", ferry::cli::add_inspect);
  add("gen", "write a random-weight model of a named shape (GGUF)", ferry::cli::add_gen);
  add("quantize", "rewrite a model (GGUF or Hugging Face folder) as a GGUF of one type or a K-quant mix",
      ferry::cli::add_quantize);
  add("bench", "measure prompt and generation speed", ferry::cli::add_bench);
  add("score", "write teacher-forced logits of every position of token prompts (float32)", ferry::cli::add_score);
  add("serve", "OpenAI-compatible HTTP server (continuous batching)", ferry::cli::add_serve);
  add("pull", "download a model from the Hugging Face Hub into its cache (org/repo[@REVISION][:QUANT])",
      ferry::cli::add_pull);
  add("models", "list the models in the Hugging Face cache and the models folder", ferry::cli::add_models);
  add("batch", "run an OpenAI Batch API file (JSONL requests in, JSONL results out) through the serving engine",
      ferry::cli::add_batch);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    const ferry::Env env = ferry::Env::read();  // every environment variable, parsed once (core/env.h)
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run(env);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "\nferry: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
