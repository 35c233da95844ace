// A model, its block pool and one session over a 64-token context in blocks of 4, with decode step graphs on or
// off: the pair the step-graph tests run side by side (graph replay against the same ops launched one by one).
#pragma once

#include <memory>

#include "engine/session.h"
#include "kv/block_pool.h"
#include "model/llama_model.h"
#include "model/model_file.h"
#include "model/weights.h"

namespace ferry {

struct GraphRunner {
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<Session> session;
};

inline GraphRunner make_graph_runner(const ModelFile& f, Backend& backend, bool graphs) {
  constexpr int32_t kContext = 64, kBlock = 4;
  GraphRunner r;
  r.model = std::make_unique<LlamaModel>(f.config, load_weights(f.config, *f.weights, f.gguf_names, backend), backend,
                                         KvCacheShape{kContext / kBlock, kBlock}, 16);
  r.model->set_step_graphs(graphs);
  r.pool = std::make_unique<BlockPool>(kContext / kBlock);
  r.session = std::make_unique<Session>(*r.model, *r.pool, kContext);
  return r;
}

}  // namespace ferry
