// One CPU rank of a tensor-parallel test: its shard of the model (parallel/sharding.h) on its own one-thread CPU
// backend, KV cache kBlocks x kBlock positions; and the random GGUF model files those tests open. Shared by
// tp_cpu_test, moe_parallel_cpu_test and random_weights_test.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd.h"
#include "fixtures/test_paths.h"
#include "model/model_file.h"
#include "model/random_model.h"
#include "parallel/sharding.h"
#include "parallel/thread_group.h"

namespace ferry::test {

inline constexpr int32_t kRankBlock = 16;  // positions per KV block
inline constexpr int32_t kRankBlocks = 8;  // 128 positions of context

// Writes a random model of config c as GGUF (write_random_model, one thread), maps it and removes the file (the
// mapping stays valid). The process id in the name: ctest -j runs a file's cases as parallel processes, and one
// rewriting a file another has mapped ends that one with SIGBUS.
inline ModelFile write_and_open_random_model(const ModelConfig& c, DType wt, uint64_t seed, RandomInit init,
                                             const std::string& tag) {
  const std::string path = temp_path(tag + "_" + std::to_string(getpid()) + ".gguf");
  write_random_model(path, c, wt, seed, 1, true, init);
  ModelFile f = open_model(path);
  std::remove(path.c_str());
  return f;
}

// world 1 with comm null: the unsharded model.
inline RankModel make_cpu_rank(const ModelFile& f, int rank, ParallelLayout layout, Communicator* comm,
                               CpuKernels kernels = CpuKernels::Fast) {
  const ShardPlan plan = make_shard_plan(f.config, rank, layout);
  RankModel rm;
  CpuBackendOptions o;
  o.kernels = kernels;
  o.n_threads = 1;
  o.simd = detect_simd();
  rm.backend = std::make_unique<CpuBackend>(o);
  ModelWeights w = load_sharded_weights(plan, *f.weights, f.gguf_names, *rm.backend);
  rm.model = std::make_unique<LlamaModel>(plan.local, std::move(w), *rm.backend,
                                          KvCacheShape{kRankBlocks, kRankBlock}, 64, make_parallel_context(plan, comm));
  return rm;
}
// Tensor parallelism over `world` ranks.
inline RankModel make_cpu_rank(const ModelFile& f, int rank, int world, Communicator* comm,
                               CpuKernels kernels = CpuKernels::Fast) {
  return make_cpu_rank(f, rank, ParallelLayout{.tp = world}, comm, kernels);
}

}  // namespace ferry::test
