// ferry run: generate text from a prompt, streaming tokens as they are made, then the speed.
#include <cstdio>

#include "commands.h"
#include "common_options.h"
#include "core/check.h"
#include "ferry/tools.h"

namespace ferry::cli {

Runner add_run(CLI::App& app) {
  struct Opts {
    ModelOptions model;
    SamplingOptions sampling;
    SpecCliOptions spec;
    std::string prompt, system;
    int n_predict = 128;
    bool chat = false;
  };
  auto o = std::make_shared<Opts>();
  o->model.add(app);
  o->sampling.add(app);
  o->spec.add(app);
  app.add_option("-p,--prompt", o->prompt, "the prompt")->required();
  app.add_option("-n,--n-predict", o->n_predict, "tokens to generate")->check(CLI::Range(0, 1 << 24));
  app.add_flag("--chat", o->chat, "wrap the prompt in the model's chat template as a user turn");
  app.add_option("--system", o->system, "system message (with --chat)");
  return [o](const Env& env) {
    FERRY_CHECK(is_valid_utf8(o->prompt), "the prompt is not valid UTF-8");
    o->sampling.params.validate();
    EngineOptions eo = o->model.engine_options(resolve_model(o->model.model, env), env);
    o->spec.apply(eo, [&](const std::string& m) { return resolve_model(m, env); });
    Engine engine(eo);
    std::string text = o->prompt;
    bool parse_special = false;
    if (o->chat) {
      std::vector<ChatTurn> turns;
      if (!o->system.empty()) turns.push_back({"system", o->system});
      turns.push_back({"user", o->prompt});
      text = engine.apply_chat_template(turns, true);
      parse_special = true;  // the template's markers are special tokens
    }
    const std::vector<int32_t> prompt = engine.tokenize(text, true, parse_special);
    if (!o->chat) {
      std::fputs(o->prompt.c_str(), stdout);
      std::fflush(stdout);
    }
    const GenerateResult r = engine.generate(prompt, o->sampling.params, o->n_predict, [](std::string_view piece, int32_t) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    std::printf("\n");
    std::fprintf(stderr, "\nprompt: %d tokens in %.3f s (%.1f tok/s) | generation: %zu tokens in %.3f s (%.1f tok/s) | %s%s\n",
                 r.n_prompt_computed, r.prompt_seconds, r.prompt_seconds > 0 ? r.n_prompt_computed / r.prompt_seconds : 0.0,
                 r.tokens.size(), r.gen_seconds, r.gen_seconds > 0 ? double(r.tokens.size()) / r.gen_seconds : 0.0,
                 engine.info().backend.c_str(), o->spec.spec == "off" ? "" : spec_summary(r).c_str());
    return 0;
  };
}

}  // namespace ferry::cli
