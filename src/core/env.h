// Every environment variable ferry reads is declared here: typed, with its default, parsed once by Env::read()
// (the CLI's main and the test fixtures call it; everything else gets the struct passed down). README.md lists
// exactly the names of env_variables() (tests/core/env_test.cpp checks it). A bad value is a ferry::Error naming
// the variable.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/cuda_tune.h"

namespace ferry {

// FERRY_TP_ALLREDUCE: how a GPU group sums small messages (<= 512 KiB f32).
enum class TpAllReduce {
  kAuto,  // the one-shot peer-memory all-reduce when every rank can set it up, else NCCL
  kNccl,  // NCCL for every size
  kPeer,  // the peer all-reduce; an error when the GPUs cannot reach each other's memory
};

const char* tp_allreduce_name(TpAllReduce a);  // "auto", "nccl", "peer"

// FERRY_TP_CHILD=RANK,WORLD,FD: set by `--tp N`'s launcher on the N-1 processes it starts (parallel/launcher.h).
struct TpChild {
  int rank = 0;   // 1..world-1
  int world = 0;  // N
  int fd = -1;    // the socket to rank 0 (an inherited descriptor)
};

// Set by mpirun, not by ferry (Open MPI: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}; MPICH/Intel: PMI_RANK,
// PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS): `mpirun -np N ferry ...` runs one rank per process.
struct MpiEnv {
  std::optional<std::string> rank, size, local_rank, local_size;
};

// The Hugging Face cache and Hub variables (huggingface_hub's own names, read as huggingface_hub reads them:
// the cache is HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub).
struct HubEnv {
  std::optional<std::string> hf_home;         // HF_HOME
  std::optional<std::string> hf_hub_cache;    // HF_HUB_CACHE
  std::optional<std::string> hf_token;        // HF_TOKEN: a token for gated and private repos (`ferry pull`)
  std::optional<std::string> hf_endpoint;     // HF_ENDPOINT: the Hub's address (default https://huggingface.co)
  std::optional<std::string> xdg_cache_home;  // XDG_CACHE_HOME
  std::optional<std::string> home;            // HOME
};

struct Env {
  std::optional<std::string> simd;        // FERRY_SIMD: scalar | avx2 | avx512 (unset: the best this CPU runs)
  std::optional<std::string> models_dir;  // FERRY_MODELS_DIR: where the default model is looked for
  bool debug_log = false;                 // FERRY_LOG=debug: per-step diagnostics on stderr
  std::optional<std::string> testdata;    // FERRY_TESTDATA: the shared test-data folder (tests only)
  std::optional<std::string> source_dir;  // FERRY_SOURCE_DIR: the repository, for test binaries run elsewhere
  std::optional<TpChild> tp_child;        // FERRY_TP_CHILD (the launcher's children only)
  int tp_timeout_s = 300;                 // FERRY_TP_TIMEOUT: seconds a tensor-parallel step may take
  TpAllReduce tp_allreduce = TpAllReduce::kAuto;  // FERRY_TP_ALLREDUCE: auto | nccl | peer
  std::optional<std::string> tp_addr;     // FERRY_TP_ADDR: host:port of rank 0 for mpirun-started groups
  std::optional<std::string> api_key;     // FERRY_API_KEY: one more API key `ferry serve` accepts (its --api-key)
  std::optional<bool> cuda_prefill_bf16;  // FERRY_CUDA_PREFILL_BF16=0|1 (unset: when the copies fit in 40% of free)
  bool cuda_profile = false;              // FERRY_CUDA_PROFILE=1: per-op GPU times at exit (step graphs off)
  bool cuda_stamps = false;               // FERRY_CUDA_STAMPS=1: phases inside the last decode launches, at exit
  CudaTune cuda_tune;                     // FERRY_CUDA_TUNE: kernel choices for comparisons (core/cuda_tune.h)
  MpiEnv mpi;                             // mpirun's variables
  HubEnv hub;                             // huggingface_hub's variables (the model cache, `ferry pull`)
  bool nccl_nvls_set = false;             // NCCL_NVLS_ENABLE is set (the launcher sets it to 0 otherwise)

  static Env read();  // parses the process environment; call once and pass the result down
};

// One declared variable: its name, its type or values, its default and what it does (README.md's table). Names
// without the FERRY_ prefix are other tools' standard variables that ferry reads the same way (huggingface_hub's).
struct EnvVarInfo {
  std::string_view name, values, fallback, meaning;
};
std::span<const EnvVarInfo> env_variables();

}  // namespace ferry
