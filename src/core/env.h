// Every environment variable ferry reads is declared here, and read only through this struct.
#pragma once

#include <optional>
#include <string>

namespace ferry {

struct Env {
  // FERRY_SIMD: force a CPU SIMD level for the fast kernels ("scalar", "avx2", "avx512"); unset = best.
  std::optional<std::string> simd;
  // FERRY_MODELS_DIR: where `ferry run` looks for the default model (default: <repo>/models or ./models).
  std::optional<std::string> models_dir;
  // FERRY_LOG: "debug" prints per-step diagnostics to stderr.
  std::optional<std::string> log;
  // FERRY_TESTDATA: the shared test-data folder for tests (default: ../shared/testdata from the repo).
  std::optional<std::string> testdata;
  // FERRY_SOURCE_DIR: where tests find the repository (default: the path they were built from; the device
  // script sets it because binaries built here run from another folder there).
  std::optional<std::string> source_dir;

  // Tensor parallelism (src/dist/launcher): set by `--tp N`'s launcher on the N-1 processes it starts.
  std::optional<std::string> tp_rank;     // FERRY_TP_RANK: this process's rank (1..N-1)
  std::optional<std::string> tp_world;    // FERRY_TP_WORLD: N
  std::optional<std::string> tp_fd;       // FERRY_TP_FD: the socket to rank 0 (inherited descriptor number)
  // FERRY_TP_TIMEOUT: seconds a tensor-parallel step may take before every rank is ended (default 300).
  std::optional<std::string> tp_timeout;
  // FERRY_TP_ALLREDUCE: how a GPU group sums small messages (<= 512 KiB f32): "peer" (the one-shot peer-memory
  // all-reduce, backends/cuda/peer_all_reduce.h; an error when the GPUs cannot reach each other's memory),
  // "nccl" (NCCL for every size), "auto" or unset (peer when every rank can set it up, else NCCL).
  std::optional<std::string> tp_allreduce;
  // FERRY_TP_PEER_PROTOCOL: how the peer all-reduce knows a peer's values have landed: "lamport" (default; the
  // values themselves, written over a -0.0 sentinel) or "flags" (a system-scope fence and a flag per block).
  std::optional<std::string> tp_peer_protocol;
  // FERRY_TP_MATVEC_PUSH: "0" makes the peer all-reduce push a row-parallel projection's output itself; "1" or
  // unset: the projection's matvec pushes its rows from its epilogue where it can (lamport protocol only).
  std::optional<std::string> tp_matvec_push;
  // Set by mpirun (Open MPI: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK}; MPICH/Intel: PMI_RANK, PMI_SIZE,
  // MPI_LOCALRANKID): `mpirun -np N ferry ...` runs one rank per process.
  std::optional<std::string> mpi_rank, mpi_size, mpi_local_rank;
  // OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI) or MPI_LOCALNRANKS (MPICH/Intel): how many ranks share this host.
  std::optional<std::string> mpi_local_size;
  // FERRY_TP_ADDR: host:port where rank 0 of an mpirun-started group listens and the other ranks connect
  // (dist/tcp_rendezvous.h). Default 127.0.0.1:29517 when every rank is on one host; across hosts it must be
  // given (`mpirun -x FERRY_TP_ADDR=<rank-0 host>:<port> ...`).
  std::optional<std::string> tp_addr;
  // NCCL_NVLS_ENABLE: NCCL's NVLink SHARP switch; the tensor-parallel launcher sets it to 0 when unset.
  std::optional<std::string> nccl_nvls_enable;

  // FERRY_CUDA_PREFILL_BF16: "1" keeps a bf16 copy of quantized weights on the GPU for prefill matmuls (2 bytes
  // per weight more, no per-call dequantization), "0" never; unset: when the copies fit in 40% of free memory.
  std::optional<std::string> cuda_prefill_bf16;
  // FERRY_CUDA_GEMM: "cublas" sends prefill matmuls to cuBLASLt instead of ferry's Hopper GEMM (comparisons);
  // "pdl" launches ferry's Hopper GEMM with programmatic dependent launch (CudaBackendOptions::hopper_gemm_pdl).
  std::optional<std::string> cuda_gemm;
  // FERRY_CUDA_MATVEC: the decode matvec version for comparisons: 2 or 5 everywhere, 7, 9 or 10 (matvec.cuh;
  // 10: Q8_0/Q4_0/Q4_K weights only) wherever it applies and matmul_dispatch.h's rule elsewhere (unset: the rule).
  std::optional<std::string> cuda_matvec;
  // FERRY_CUDA_SKINNY: "wg" or "mma" sends every matmul of 17..255 tokens that the wgmma / mma.sync skinny GEMM
  // supports to it instead of matmul_dispatch.h's rule (in-situ comparisons); "rule" or unset: the rule.
  std::optional<std::string> cuda_skinny;
  // FERRY_CUDA_SAMPLING: "0" makes the serving engine sample every row on the host (comparisons with the
  // device sampler); "1" or unset: on the device where the backend can (ServingOptions.device_sampling).
  std::optional<std::string> cuda_sampling;
  // FERRY_PIPELINED_DECODE=0/1: Engine::generate launches each decode step before the host reads the previous
  // step's token (device sampling only); default on.
  std::optional<std::string> pipelined_decode;
  // FERRY_CUDA_PROFILE: "1" times every CUDA op with events (step graphs off) and prints a per-op table of
  // GPU time and bandwidth to stderr when the backend is destroyed (see backends/cuda/op_profiler.h).
  std::optional<std::string> cuda_profile;
  // FERRY_CUDA_FUSED_QKV: "0" runs a decode step's q/k/v epilogue and attention as two launches instead of one
  // (CudaBackend::qkv_attention; comparisons); "1" or unset: fused where it applies.
  std::optional<std::string> cuda_fused_qkv;
  // FERRY_CUDA_DECODE_EARLY: "0" makes the decode attention kernel request its first K/V tiles after the PDL wait
  // instead of before it (CudaBackendOptions::decode_early_kv; comparisons); "1" or unset: before.
  std::optional<std::string> cuda_decode_early;
  // FERRY_CUDA_FUSED_ADD_NORM: "1" runs a decode step's wo / down projection and the residual add + RMSNorm after it
  // as one launch where it applies (CudaBackendOptions::fused_add_norm); "0" or unset: two (measured no slower in
  // captured steps, where PDL hides the norm's launch).
  std::optional<std::string> cuda_fused_add_norm;
  // FERRY_CUDA_QUANT_SWIGLU: "0" runs a decode step's gate|up projection on Q8_0/Q4_0/Q4_K weights and its SwiGLU as
  // two launches (CudaBackendOptions::quant_swiglu; comparisons); "1" or unset: one (matvec v10's SwiGLU form).
  std::optional<std::string> cuda_quant_swiglu;
  // FERRY_CUDA_DECODE_FFN: "1" runs a one-token decode layer's tail after the attention as one persistent kernel
  // where it applies (CudaBackendOptions::decode_ffn); "0" or unset: single ops (measured faster, docs/perf-log.md).
  std::optional<std::string> cuda_decode_ffn;
  // FERRY_CUDA_PROLOGUE_NORM: "0" runs a one-token decode layer's FFN norm as its own launch (comparisons); "1" or
  // unset: in the gate|up matvec's prologue where it applies (CudaBackendOptions::prologue_norm).
  std::optional<std::string> cuda_prologue_norm;
  // FERRY_CUDA_QKV_NORM: "0" runs a one-token decode layer's attention norm as its own launch (comparisons); "1" or
  // unset: in the q|k|v matvec's prologue where it applies (CudaBackendOptions::qkv_norm).
  std::optional<std::string> cuda_qkv_norm;
  // FERRY_CUDA_RING_INFLIGHT / FERRY_CUDA_RING_INFLIGHT_BF16: N in 1..16: a streamed matvec's producer on
  // quantized weights (version 10) / on BF16 and F16 weights (version 9) keeps at most N ring stages in flight
  // (issued, not yet landed) per block; "0": a stage whenever a slot is free (the whole ring at once when the
  // kernel starts); unset: CudaBackendOptions::ring_inflight_quant's default (3) / ring_inflight_bf16's (0).
  std::optional<std::string> cuda_ring_inflight;
  std::optional<std::string> cuda_ring_inflight_bf16;
  // FERRY_CUDA_WEIGHTS_EVICT_FIRST=0/1: the streamed matvecs' weight copies with an L2 evict_first policy;
  // unset: CudaBackendOptions::weights_evict_first's default.
  std::optional<std::string> cuda_weights_evict_first;
  // FERRY_CUDA_ACT_LEVELS=1|2: int8 levels of the one-token Q8_0/Q4_0 matvecs' activations
  // (CudaBackendOptions::one_level_acts).
  std::optional<std::string> cuda_act_levels;
  // FERRY_CUDA_STAMPS: "1" stamps the phases of the decode attention and the matvec v10 kernels and prints the last
  // launch of each at exit (CudaBackendOptions::phase_stamps; diagnostics); "0" or unset: off.
  std::optional<std::string> cuda_stamps;
  // FERRY_PROMPT_GRAPHS: "1" pads the serving engine's prompt-carrying steps to a few shapes and replays them from
  // step graphs like decode steps (EngineOptions::prompt_graphs; engine/model_runner.h); "0" off; unset: the option.
  std::optional<std::string> prompt_graphs;
  // FERRY_ASYNC_SCHEDULING: "0" makes the serving engine wait for each step's tokens before scheduling the next,
  // "1" overlaps them (ServingOptions::async_scheduling); unset: the option.
  std::optional<std::string> async_scheduling;
  // FERRY_API_KEY: an API key `ferry serve` requires (Authorization: Bearer KEY), besides any --api-key.
  std::optional<std::string> api_key;

  static Env read();  // reads the process environment once; pass the result down
};

// The value of an on/off variable: "1" on, "0" off, `fallback` when unset; anything else is a ferry::Error
// naming the variable (e.g. env_switch(env.cuda_profile, "FERRY_CUDA_PROFILE", false)).
bool env_switch(const std::optional<std::string>& value, const char* name, bool fallback);

}  // namespace ferry
