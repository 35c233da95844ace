#include "engine/tp_setup.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/check.h"
#include "parallel/launcher.h"
#include "parallel/link_communicator.h"
#include "parallel/sharding.h"
#include "parallel/thread_group.h"
#ifdef FERRY_HAS_NCCL
#include "backends/cuda/comm/peer_all_reduce.h"
#include "backends/cuda/cuda_backend.h"
#include "parallel/nccl_communicator.h"
#include "parallel/step_collectives.h"
#endif

namespace ferry {

struct TpRuntime {
  std::unique_ptr<TpLaunch> launch;          // processes and the host link (GPU)
  std::unique_ptr<Communicator> comm;        // this process's communicator (GPU)
  std::unique_ptr<ThreadTpGroup> threads;    // the follower ranks (CPU)
  LlamaModel* leader = nullptr;

  ~TpRuntime() {
    threads.reset();  // ends and joins the follower threads through the leader
    if (comm && leader) {
      try {
        leader->end_followers();
      } catch (const std::exception&) {  // the group failed already
      }
      // The leader's decode graphs hold NCCL kernels of this communicator: destroy them first (the followers
      // destroy their model before their communicator). With the graphs alive, every rank of a 2-GPU run
      // printed its results and then waited in teardown (the suspected cause; ~NcclCommunicator bounds it).
      leader->drop_graphs();
    }
    comm.reset();
    launch.reset();  // reaps the follower processes
  }
};

namespace {

// The layout of `world` ranks: expert-parallel where --ep asked for it, else tensor-parallel (under mpirun the
// world is the number of processes, and --ep / --tp, where given, must equal it).
ParallelLayout layout_of(const EngineOptions& o, int world) {
  if (o.ep > 1) {
    FERRY_CHECK(o.ep == world, "--ep {}: {} ranks were started (under mpirun --ep must equal -np)", o.ep, world);
    return {.ep = world};
  }
  return {.tp = world};
}

// The kv shape and step size as bytes, for rank 0 to send to the others.
std::vector<uint8_t> pack(const KvCacheShape& kv, int32_t max_step) {
  std::vector<uint8_t> b(16);
  std::memcpy(b.data(), &kv.n_blocks, 4);
  std::memcpy(b.data() + 4, &kv.block_size, 4);
  std::memcpy(b.data() + 8, &max_step, 4);
  std::memcpy(b.data() + 12, &kv.max_seq_tokens, 4);
  return b;
}

#ifdef FERRY_HAS_NCCL
// FERRY_TP_ALLREDUCE (core/env.h): installs the one-shot peer all-reduce for small messages on every rank, or
// none. Collective over the link: every rank tries, and the peer path is used only when all of them succeeded.
void setup_small_all_reduce(const Env& env, HostLink& link, bool same_host, NcclCommunicator& comm,
                            CudaBackend& cuda) {
  std::string mode = tp_allreduce_name(env.tp_allreduce);
  // Rank 0's setting on every rank (under mpirun a host's environment may differ unless passed with -x): the
  // steps below are collective, so all ranks must take the same branch.
  std::vector<uint8_t> m(mode.begin(), mode.end());  // never empty (an empty broadcast is the stop message)
  link.broadcast(m);
  mode.assign(m.begin(), m.end());
  if (mode == "nccl") return;
  if (!same_host) {  // CUDA IPC reaches only this host's GPUs (same_host: rank 0 decided, every rank agrees)
    FERRY_CHECK(mode != "peer", "FERRY_TP_ALLREDUCE=peer: the ranks run on more than one host; use auto or nccl");
    return;
  }
  if (link.world() > PeerAllReduce::kMaxWorld) {
    FERRY_CHECK(mode != "peer", "FERRY_TP_ALLREDUCE=peer: the peer all-reduce takes at most {} ranks, not {}",
                PeerAllReduce::kMaxWorld, link.world());
    return;
  }
  // FERRY_CUDA_TUNE=peer=..., rank 0's on every rank (all must use the same one).
  std::string protocol = env.cuda_tune.peer == PeerTune::kFlags ? "flags" : "lamport";
  std::vector<uint8_t> pb(protocol.begin(), protocol.end());
  link.broadcast(pb);
  protocol.assign(pb.begin(), pb.end());
  std::shared_ptr<PeerAllReduce> peer;
  std::string error;
  std::vector<uint8_t> handle;
  try {
    peer = std::make_shared<PeerAllReduce>(link.rank(), link.world(), PeerAllReduce::kMaxBytes,
                                           protocol == "flags" ? PeerProtocol::kFlags : PeerProtocol::kLamport);
    // FERRY_CUDA_STAMPS: each call's phases too (a report on stderr at exit).
    if (env.cuda_stamps) peer->record_phases();
    handle = peer->ipc_handle();
  } catch (const std::exception& e) {
    error = e.what();
  }
  auto handles = link.all_gather(handle);  // an empty handle: that rank could not set it up
  if (error.empty()) {
    try {
      for (const auto& h : handles) FERRY_CHECK(!h.empty(), "another rank could not allocate its buffer");
      peer->open_ipc(handles);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  std::vector<uint8_t> ok(error.empty() ? 1 : 0, 1);
  const auto oks = link.all_gather(ok);
  bool all_ok = true;
  for (const auto& o : oks) all_ok = all_ok && !o.empty();
  if (!all_ok) {
    FERRY_CHECK(mode != "peer", "FERRY_TP_ALLREDUCE=peer: the peer all-reduce could not be set up on every rank{}{}",
                error.empty() ? "" : ": ", error);
    return;  // auto: NCCL for every size
  }
  comm.set_small_all_reduce([peer](float* x, size_t n, CUstream_st* stream) {
    if (!peer->fits(n)) return false;
    peer->run(x, n, stream);
    return true;
  });
  // The backend's sublayer ends fuse it with the residual add and the norm (CudaBackend::sublayer_end).
  cuda.attach_peer_all_reduce(std::move(peer));
}
#endif

// A follower process: runs rank 0's steps until it ends the group, then exits (never back to the command).
[[noreturn]] void follow_and_exit(ParallelModel& pm, std::shared_ptr<TpRuntime> rt, int rank) {
  int status = 0;
  try {
    while (pm.model->follow()) {
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry: tensor-parallel rank %d: %s\n", rank, e.what());
    status = 3;
  }
  pm.model.reset();
  rt.reset();
  pm.backend.reset();
  std::fflush(stdout);
  std::exit(status);
}

// The KV cache shape rank 0 chose, on every rank (over the communicator).
std::pair<KvCacheShape, int32_t> agree_kv(Communicator& comm, const ShardPlan& plan,
                                          const std::function<std::pair<KvCacheShape, int32_t>(const ModelConfig&)>& kv_for) {
  std::vector<uint8_t> shape;
  if (comm.rank() == 0) {
    const auto [kv, max_step] = kv_for(plan.local);
    shape = pack(kv, max_step);
  }
  comm.broadcast(shape);
  FERRY_CHECK(shape.size() == 16, "tensor-parallel rank {}: bad cache-shape message", comm.rank());
  KvCacheShape kv;
  int32_t max_step = 0;
  std::memcpy(&kv.n_blocks, shape.data(), 4);
  std::memcpy(&kv.block_size, shape.data() + 4, 4);
  std::memcpy(&max_step, shape.data() + 8, 4);
  std::memcpy(&kv.max_seq_tokens, shape.data() + 12, 4);
  return {kv, max_step};
}

// `mpirun -np N ferry ... --device cpu`: one rank per process, collectives over the host link
// (parallel/link_communicator.h); each rank's backend uses all cores of its process unless -t says otherwise.
ParallelModel build_cpu_process_rank(const EngineOptions& o, const ModelFile& file,
                                     const MakeBackendFn& make_backend,
                                     const std::function<std::pair<KvCacheShape, int32_t>(const ModelConfig&)>& kv_for) {
  const Env& env = o.env;
  make_shard_plan(file.config, 0, layout_of(o, mpi_world(env)));  // a clear error before the ranks meet
  ParallelModel pm;
  auto rt = std::make_shared<TpRuntime>();
  rt->launch = launch_tp(o.tp, env);
  const int rank = rt->launch->rank;
  const ShardPlan plan = make_shard_plan(file.config, rank, layout_of(o, rt->launch->world));
  rt->comm = std::make_unique<LinkCommunicator>(
      LinkCommunicatorOptions{.link = rt->launch->link.get(), .timeout = tp_timeout(env)});
  pm.backend = make_backend(0, o.n_threads);
  ModelWeights w = load_sharded_weights(plan, *file.weights, file.gguf_names, *pm.backend);
  const auto [kv, max_step] = agree_kv(*rt->comm, plan, kv_for);
  pm.model = std::make_unique<LlamaModel>(plan.local, std::move(w), *pm.backend, kv, max_step,
                                          make_parallel_context(plan, rt->comm.get()));
  if (rank != 0) follow_and_exit(pm, std::move(rt), rank);
  rt->leader = pm.model.get();
  pm.tp = std::move(rt);
  return pm;
}

}  // namespace

ParallelModel build_parallel_model(const EngineOptions& o, const ModelFile& file,
                                   const MakeBackendFn& make_backend,
                                   const std::function<std::pair<KvCacheShape, int32_t>(const ModelConfig&)>& kv_for) {
  const Env& env = o.env;
  FERRY_CHECK(o.tp >= 1 && o.tp <= 64, "--tp {} out of range (1..64)", o.tp);
  FERRY_CHECK(o.ep >= 1 && o.ep <= 64, "--ep {} out of range (1..64)", o.ep);
  FERRY_CHECK(o.tp == 1 || o.ep == 1, "--tp {} with --ep {}: use one of them (tensor and expert parallelism do not "
              "combine yet)", o.tp, o.ep);
  const ModelConfig& c = file.config;
  ParallelModel pm;

  const int mpi = mpi_world(env);  // > 1: started by mpirun, one rank per process
  if (mpi > 1 && o.device == "cpu") return build_cpu_process_rank(o, file, make_backend, kv_for);
  if (mpi == 1 && (o.device == "cpu" || o.world() == 1)) {
    // One process: world 1, or N rank threads sharing this machine's cores.
    const int world = o.world();
    const ParallelLayout layout = layout_of(o, world);
    const ShardPlan plan0 = make_shard_plan(c, 0, layout);  // checks divisibility before anything is loaded
    // The rank threads share the cores: each rank's pool gets its share (all of them at world 1).
    const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
    const int threads_per_rank = world == 1 ? o.n_threads : std::max(1, (o.n_threads > 0 ? o.n_threads : hw) / world);
    std::unique_ptr<ThreadTpGroup> group;
    if (world > 1) group = std::make_unique<ThreadTpGroup>(world, tp_timeout(env));
    pm.backend = make_backend(0, threads_per_rank);
    ModelWeights w = load_sharded_weights(plan0, *file.weights, file.gguf_names, *pm.backend);
    const auto [kv, max_step] = kv_for(plan0.local);
    pm.model = std::make_unique<LlamaModel>(plan0.local, std::move(w), *pm.backend, kv, max_step,
                                            make_parallel_context(plan0, group ? &group->comm(0) : nullptr));
    if (group) {
      group->start(*pm.model, [&, kv = kv, max_step = max_step](int rank, Communicator& comm) {
        const ShardPlan plan = make_shard_plan(c, rank, layout);
        RankModel rm;
        rm.backend = make_backend(0, threads_per_rank);
        ModelWeights wr = load_sharded_weights(plan, *file.weights, file.gguf_names, *rm.backend);
        rm.model = std::make_unique<LlamaModel>(plan.local, std::move(wr), *rm.backend, kv, max_step,
                                                make_parallel_context(plan, &comm));
        return rm;
      });
      pm.tp = std::make_shared<TpRuntime>();
      pm.tp->threads = std::move(group);
      pm.tp->leader = pm.model.get();
    }
    return pm;
  }

#ifdef FERRY_HAS_NCCL
  FERRY_CHECK(o.device == "cuda", "--tp {} on device '{}': tensor parallelism runs on cpu or cuda", o.tp, o.device);
  // The CUDA expert kernels index every expert (cuda_backend_moe.cpp): a rank's part of them is not wired there.
  FERRY_CHECK(o.ep == 1, "--ep {} on device cuda: expert parallelism runs on the CPU only for now (use --tp on the "
              "GPU)", o.ep);
  make_shard_plan(c, 0, mpi > 1 ? mpi : o.tp);  // a clear error before any process starts
  auto rt = std::make_shared<TpRuntime>();
  rt->launch = launch_tp(o.tp, env);
  const int rank = rt->launch->rank, world = rt->launch->world;
  const ShardPlan plan = make_shard_plan(c, rank, world);
  pm.backend = make_backend(rt->launch->local_rank, o.n_threads);
  auto* cuda = dynamic_cast<CudaBackend*>(pm.backend.get());
  FERRY_ASSERT(cuda != nullptr);
  rt->comm = std::make_unique<NcclCommunicator>(
      NcclCommunicatorOptions{.link = rt->launch->link.get(), .stream = cuda->stream(), .timeout = tp_timeout(env)});
  setup_small_all_reduce(env, *rt->launch->link, rt->launch->same_host, static_cast<NcclCommunicator&>(*rt->comm),
                         *cuda);
  ModelWeights w = load_sharded_weights(plan, *file.weights, file.gguf_names, *pm.backend);
  // Rank 0 sizes the cache (for its shard) and every rank uses that shape.
  const auto [kv, max_step] = agree_kv(*rt->comm, plan, kv_for);
  rt->comm->step_done();
  pm.model = std::make_unique<LlamaModel>(plan.local, std::move(w), *pm.backend, kv, max_step,
                                          make_parallel_context(plan, rt->comm.get()));
  // Every rank: the collectives of one decode step on their own (reported by rank 0; parallel/step_collectives.h).
  const StepCollectives sc = time_step_collectives(*rt->comm, cuda->stream(), c.n_layers, c.dim,
                                                   int64_t(world) * plan.vocab.local_rows);
  rt->comm->step_done();
  if (rank == 0) {
    const std::string how = tp_allreduce_name(env.tp_allreduce);
    pm.facts.emplace_back(
        "tp.collectives",
        fmt::format("{:.1f} us per decode step: {} all-reduces of {} B (FERRY_TP_ALLREDUCE={}) + logits all-gather of "
                    "{} B, alone in a CUDA graph (measured at load; a lower bound of their cost inside a step)",
                    sc.us_per_step, sc.all_reduces, sc.all_reduce_bytes, how, sc.gather_bytes));
    pm.facts.emplace_back("tp.collectives_us", fmt::format("{:.1f}", sc.us_per_step));
  }
  if (rank == 0) {
    rt->leader = pm.model.get();
    pm.tp = std::move(rt);
    return pm;
  }
  follow_and_exit(pm, std::move(rt), rank);
#else
  fail("--tp {} on device '{}': this build has no NCCL (configure with -DFERRY_NCCL_ROOT=<nccl folder>)", o.tp,
       o.device);
#endif
}

}  // namespace ferry
