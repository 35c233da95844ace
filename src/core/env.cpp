#include "core/env.h"

#include <charconv>
#include <cstdlib>

#include "core/check.h"

namespace ferry {
namespace {

constexpr EnvVarInfo kVariables[] = {
    {"FERRY_SIMD", "scalar|avx2|avx512", "the best this CPU runs", "forces a SIMD level for the fast CPU kernels"},
    {"FERRY_MODELS_DIR", "folder", "<repo>/models or ./models", "where the default model is looked for"},
    {"FERRY_LOG", "debug", "off", "prints diagnostics: the serving engine's step profile, host enqueue and device wait"},
    {"FERRY_TESTDATA", "folder", "../shared/testdata", "the shared test data (tests only)"},
    {"FERRY_SOURCE_DIR", "folder", "the build's source", "the repository, for test binaries run elsewhere"},
    {"FERRY_TP_CHILD", "RANK,WORLD,FD", "unset", "set by --tp N's launcher on the processes it starts"},
    {"FERRY_TP_TIMEOUT", "seconds", "300", "how long a tensor-parallel step may take before every rank ends"},
    {"FERRY_TP_ALLREDUCE", "auto|nccl|peer", "auto", "how a GPU group sums small messages"},
    {"FERRY_TP_ADDR", "host:port", "127.0.0.1:29517 on one host", "where rank 0 of an mpirun-started group listens"},
    {"FERRY_API_KEY", "key", "unset", "an API key `ferry serve` requires (besides --api-key, --api-key-file)"},
    {"FERRY_CUDA_PREFILL_BF16", "0|1", "when the copies fit in 40% of free memory",
     "a bf16 copy of quantized weights for prefill"},
    {"FERRY_CUDA_PROFILE", "0|1", "0", "every CUDA op's GPU time, printed at exit (step graphs off)"},
    {"FERRY_CUDA_STAMPS", "0|1", "0", "the phases inside the last decode attention and matvec launches, at exit"},
    {"FERRY_CUDA_TUNE", "key=value,...", "the measured defaults", "kernel choices for comparisons (docs/cuda.md)"},
    // huggingface_hub's names, read as it reads them (models by name, `ferry pull`, `ferry models`).
    {"HF_HUB_CACHE", "folder", "$HF_HOME/hub", "the Hugging Face cache that `-m org/repo` and `ferry pull` use"},
    {"HF_HOME", "folder", "$XDG_CACHE_HOME/huggingface or ~/.cache/huggingface", "the Hugging Face home (its hub/ is the cache)"},
    {"HF_TOKEN", "token", "unset", "the token `ferry pull` sends for gated and private repos (besides --token)"},
    {"HF_ENDPOINT", "URL", "https://huggingface.co", "the Hub `ferry pull` downloads from"},
    {"XDG_CACHE_HOME", "folder", "~/.cache", "where HF_HOME is when unset"},
    {"HOME", "folder", "the user's home", "where ~/.cache is"},
};

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<std::string> first(const char* a, const char* b) {
  auto v = get(a);
  return v ? v : get(b);
}

bool on_off(const char* name, bool fallback) {
  const auto v = get(name);
  if (!v) return fallback;
  FERRY_CHECK(*v == "0" || *v == "1", "{}='{}': use 1 (on) or 0 (off)", name, *v);
  return *v == "1";
}

int whole_number(std::string_view s, const char* what) {
  int v = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  FERRY_CHECK(ec == std::errc() && end == s.data() + s.size() && v >= 0, "{}: '{}' is not a whole number", what, s);
  return v;
}

TpChild parse_tp_child(const std::string& v) {
  const size_t a = v.find(','), b = a == std::string::npos ? a : v.find(',', a + 1);
  FERRY_CHECK(b != std::string::npos, "FERRY_TP_CHILD='{}': expected RANK,WORLD,FD", v);
  TpChild c{.rank = whole_number(std::string_view(v).substr(0, a), "FERRY_TP_CHILD rank"),
            .world = whole_number(std::string_view(v).substr(a + 1, b - a - 1), "FERRY_TP_CHILD world"),
            .fd = whole_number(std::string_view(v).substr(b + 1), "FERRY_TP_CHILD fd")};
  FERRY_CHECK(c.rank >= 1 && c.rank < c.world, "FERRY_TP_CHILD={}: rank {} outside a world of {}", v, c.rank, c.world);
  return c;
}

}  // namespace

std::span<const EnvVarInfo> env_variables() { return kVariables; }

const char* tp_allreduce_name(TpAllReduce a) {
  return a == TpAllReduce::kNccl ? "nccl" : a == TpAllReduce::kPeer ? "peer" : "auto";
}

Env Env::read() {
  Env e;
  e.simd = get("FERRY_SIMD");
  FERRY_CHECK(!e.simd || *e.simd == "scalar" || *e.simd == "avx2" || *e.simd == "avx512",
              "FERRY_SIMD='{}': use scalar, avx2 or avx512", *e.simd);
  e.models_dir = get("FERRY_MODELS_DIR");
  if (const auto log = get("FERRY_LOG")) {
    FERRY_CHECK(*log == "debug", "FERRY_LOG='{}': the only level is debug", *log);
    e.debug_log = true;
  }
  e.api_key = get("FERRY_API_KEY");
  e.testdata = get("FERRY_TESTDATA");
  e.source_dir = get("FERRY_SOURCE_DIR");
  if (const auto child = get("FERRY_TP_CHILD")) e.tp_child = parse_tp_child(*child);
  if (const auto t = get("FERRY_TP_TIMEOUT")) {
    e.tp_timeout_s = whole_number(*t, "FERRY_TP_TIMEOUT");
    FERRY_CHECK(e.tp_timeout_s > 0, "FERRY_TP_TIMEOUT='{}' must be a positive number of seconds", *t);
  }
  if (const auto a = get("FERRY_TP_ALLREDUCE")) {
    FERRY_CHECK(*a == "auto" || *a == "nccl" || *a == "peer", "FERRY_TP_ALLREDUCE='{}': use auto, nccl or peer", *a);
    e.tp_allreduce = *a == "nccl" ? TpAllReduce::kNccl : *a == "peer" ? TpAllReduce::kPeer : TpAllReduce::kAuto;
  }
  e.tp_addr = get("FERRY_TP_ADDR");
  if (get("FERRY_CUDA_PREFILL_BF16")) e.cuda_prefill_bf16 = on_off("FERRY_CUDA_PREFILL_BF16", false);
  e.cuda_profile = on_off("FERRY_CUDA_PROFILE", false);
  e.cuda_stamps = on_off("FERRY_CUDA_STAMPS", false);
  if (const auto tune = get("FERRY_CUDA_TUNE")) e.cuda_tune = CudaTune::parse(*tune);
  e.mpi.rank = first("OMPI_COMM_WORLD_RANK", "PMI_RANK");
  e.mpi.size = first("OMPI_COMM_WORLD_SIZE", "PMI_SIZE");
  e.mpi.local_rank = first("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID");
  e.mpi.local_size = first("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS");
  e.nccl_nvls_set = get("NCCL_NVLS_ENABLE").has_value();
  e.hub.hf_home = get("HF_HOME");
  e.hub.hf_hub_cache = get("HF_HUB_CACHE");
  e.hub.hf_token = get("HF_TOKEN");
  e.hub.hf_endpoint = get("HF_ENDPOINT");
  e.hub.xdg_cache_home = get("XDG_CACHE_HOME");
  e.hub.home = get("HOME");
  return e;
}

}  // namespace ferry
