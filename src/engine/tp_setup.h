// Builds this process's part of a tensor-parallel model for EngineOptions::tp (see src/parallel):
//  - tp 1: the plain model (identity communicator).
//  - --device cpu --tp N: N ranks as threads of this process (ThreadTpGroup); rank 0 is returned.
//  - --device cuda --tp N: one process per GPU (parallel/launcher): rank 0 starts ranks 1..N-1 as children
//    running the same command; a child builds its shard, follows rank 0's steps and exits when rank 0 ends
//    (it never returns from here). Collectives through NCCL.
//  - under `mpirun -np N` (parallel/launcher): one rank per process as above, wherever mpirun put them; with
//    --device cpu the collectives go over the host link (parallel/link_communicator.h).
// Rank 0 decides the KV cache shape (sizing called with the rank's shard config) and sends it to the others.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/env.h"
#include "ferry/engine.h"
#include "model/llama_model.h"
#include "model/model_file.h"
#include "ops/backend.h"

namespace ferry {

// Everything a tensor-parallel rank 0 keeps besides its backend and model; destroy it before the model.
struct TpRuntime;

struct ParallelModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::shared_ptr<TpRuntime> tp;  // null at tp 1
  // Rank 0 of a GPU group: the collectives of one decode step timed at load (parallel/step_collectives.h), as
  // ("tp.collectives", text) for ModelInfo::facts (ferry bench prints it next to the step time).
  std::vector<std::pair<std::string, std::string>> facts;
};

using MakeBackendFn = std::function<std::unique_ptr<Backend>(int device_index, int n_threads)>;

// kv_for(local_config): the KV cache shape for this rank's shard (rank 0's is used by every rank).
ParallelModel build_parallel_model(const EngineOptions& o, const ModelFile& file,
                                   const MakeBackendFn& make_backend,
                                   const std::function<std::pair<KvCacheShape, int32_t>(const ModelConfig& local)>& kv_for);

}  // namespace ferry
