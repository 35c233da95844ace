// ferry chat: an interactive multi-turn chat. Each turn re-renders the whole conversation through the
// model's chat template; the KV cache of the common prefix is reused, so only the new turn is computed.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "common_options.h"
#include "core/check.h"
#include "ferry/tools.h"

namespace ferry::cli {

Runner add_chat(CLI::App& app) {
  struct Opts {
    ModelOptions model;
    SamplingOptions sampling;
    SpecCliOptions spec;
    std::string system;
    int n_predict = 512;
  };
  auto o = std::make_shared<Opts>();
  o->model.add(app);
  o->sampling.add(app);
  o->spec.add(app);
  app.add_option("--system", o->system, "system message");
  app.add_option("-n,--n-predict", o->n_predict, "most tokens per reply")->check(CLI::Range(1, 1 << 24));
  return [o](const Env& env) {
    o->sampling.params.validate();
    EngineOptions eo = o->model.engine_options(resolve_model(o->model.model, env), env);
    o->spec.apply(eo, [&](const std::string& m) { return resolve_model(m, env); });
    Engine engine(eo);
    FERRY_CHECK(engine.has_chat_template(), "{}: the model has no chat template", engine.info().path);
    std::vector<ChatTurn> turns;
    if (!o->system.empty()) turns.push_back({"system", o->system});
    std::fprintf(stderr, "ferry chat: %s (%s). Type a message; an empty line or Ctrl-D ends the chat, /reset starts over.\n",
                 engine.info().name.c_str(), engine.info().backend.c_str());
    std::string line;
    for (;;) {
      std::fprintf(stderr, "> ");
      if (!std::getline(std::cin, line) || line.empty()) break;
      if (line == "/reset") {
        turns.resize(o->system.empty() ? 0 : 1);
        continue;
      }
      if (!is_valid_utf8(line)) {
        std::fprintf(stderr, "ferry: that line is not valid UTF-8; please type it again\n");
        continue;
      }
      turns.push_back({"user", line});
      const std::vector<int32_t> prompt = engine.tokenize(engine.apply_chat_template(turns, true), true, true);
      if (int(prompt.size()) >= engine.info().context) {
        std::fprintf(stderr, "ferry: the conversation (%zu tokens) no longer fits the context of %d; /reset to start over\n",
                     prompt.size(), engine.info().context);
        turns.pop_back();
        continue;
      }
      const GenerateResult r = engine.generate(prompt, o->sampling.params, o->n_predict, [](std::string_view piece, int32_t) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        return true;
      });
      std::printf("\n");
      std::fflush(stdout);
      std::fprintf(stderr, "[%d new prompt tokens, %zu generated, %.1f tok/s%s]\n", r.n_prompt_computed, r.tokens.size(),
                   r.gen_seconds > 0 ? double(r.tokens.size()) / r.gen_seconds : 0.0,
                   o->spec.spec == "off" ? "" : spec_summary(r).c_str());
      turns.push_back({"assistant", r.text});
    }
    return 0;
  };
}

}  // namespace ferry::cli
