// ferry pull org/repo[@REVISION][:QUANT]: download a model into the Hugging Face cache (hub/pull.h).
#include <cstdio>

#include "commands.h"
#include "core/check.h"
#include "core/progress.h"
#include "hub/hub_cache.h"
#include "hub/pull.h"

namespace ferry::cli {

Runner add_pull(CLI::App& app) {
  struct Opts {
    std::string name, token, endpoint;
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("name", o->name, "org/repo[@REVISION][:QUANT] (QUANT picks one GGUF file, e.g. Q4_K_M)")->required();
  app.add_option("--token", o->token, "Hugging Face token for gated or private repos (default: HF_TOKEN)");
  app.add_option("--endpoint", o->endpoint, "the Hub's address (default: HF_ENDPOINT, else https://huggingface.co)");
  app.add_flag("-q,--quiet", o->quiet, "no progress bar");
  return [o](const Env& env) {
    const std::optional<hub::ModelRef> ref = hub::parse_model_ref(o->name);
    FERRY_CHECK(ref.has_value(), "'{}' is not a Hugging Face repo name (org/repo[@REVISION][:QUANT])", o->name);
    hub::PullOptions po;
    po.ref = *ref;
    po.cache = hub::hub_cache_dir(env.hub);
    po.endpoint = !o->endpoint.empty() ? o->endpoint : env.hub.hf_endpoint.value_or(hub::kDefaultEndpoint);
    po.token = !o->token.empty() ? o->token : env.hub.hf_token.value_or("");
    po.progress = progress_options(progress_mode(o->quiet));
    const hub::PullResult r = hub::pull_model(po);
    std::fprintf(stderr, "ferry pull: %s at %s: %d files downloaded (%s), %d already in the cache\n",
                 hub::to_string(*ref).c_str(), r.commit.substr(0, 12).c_str(), r.files_downloaded,
                 format_bytes(r.bytes_downloaded).c_str(), r.files_present);
    std::printf("%s\n", r.model_path.c_str());
    return 0;
  };
}

}  // namespace ferry::cli
