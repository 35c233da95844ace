#include "core/env.h"

#include <cstdlib>

#include "core/check.h"

namespace ferry {
namespace {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

}  // namespace

Env Env::read() {
  Env e;
  e.simd = get("FERRY_SIMD");
  e.models_dir = get("FERRY_MODELS_DIR");
  e.api_key = get("FERRY_API_KEY");
  e.log = get("FERRY_LOG");
  e.testdata = get("FERRY_TESTDATA");
  e.source_dir = get("FERRY_SOURCE_DIR");
  e.tp_rank = get("FERRY_TP_RANK");
  e.tp_world = get("FERRY_TP_WORLD");
  e.tp_fd = get("FERRY_TP_FD");
  e.tp_timeout = get("FERRY_TP_TIMEOUT");
  e.tp_allreduce = get("FERRY_TP_ALLREDUCE");
  e.tp_peer_protocol = get("FERRY_TP_PEER_PROTOCOL");
  e.tp_matvec_push = get("FERRY_TP_MATVEC_PUSH");
  e.mpi_rank = get("OMPI_COMM_WORLD_RANK");
  if (!e.mpi_rank) e.mpi_rank = get("PMI_RANK");
  e.mpi_size = get("OMPI_COMM_WORLD_SIZE");
  if (!e.mpi_size) e.mpi_size = get("PMI_SIZE");
  e.mpi_local_rank = get("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!e.mpi_local_rank) e.mpi_local_rank = get("MPI_LOCALRANKID");
  e.mpi_local_size = get("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!e.mpi_local_size) e.mpi_local_size = get("MPI_LOCALNRANKS");
  e.tp_addr = get("FERRY_TP_ADDR");
  e.nccl_nvls_enable = get("NCCL_NVLS_ENABLE");
  e.cuda_prefill_bf16 = get("FERRY_CUDA_PREFILL_BF16");
  e.cuda_gemm = get("FERRY_CUDA_GEMM");
  e.cuda_skinny = get("FERRY_CUDA_SKINNY");
  e.cuda_matvec = get("FERRY_CUDA_MATVEC");
  e.cuda_sampling = get("FERRY_CUDA_SAMPLING");
  e.pipelined_decode = get("FERRY_PIPELINED_DECODE");
  e.cuda_profile = get("FERRY_CUDA_PROFILE");
  e.cuda_fused_qkv = get("FERRY_CUDA_FUSED_QKV");
  e.prompt_graphs = get("FERRY_PROMPT_GRAPHS");
  e.async_scheduling = get("FERRY_ASYNC_SCHEDULING");
  e.cuda_decode_early = get("FERRY_CUDA_DECODE_EARLY");
  e.cuda_fused_add_norm = get("FERRY_CUDA_FUSED_ADD_NORM");
  e.cuda_quant_swiglu = get("FERRY_CUDA_QUANT_SWIGLU");
  e.cuda_decode_ffn = get("FERRY_CUDA_DECODE_FFN");
  e.cuda_prologue_norm = get("FERRY_CUDA_PROLOGUE_NORM");
  e.cuda_qkv_norm = get("FERRY_CUDA_QKV_NORM");
  e.cuda_ring_inflight = get("FERRY_CUDA_RING_INFLIGHT");
  e.cuda_ring_inflight_bf16 = get("FERRY_CUDA_RING_INFLIGHT_BF16");
  e.cuda_weights_evict_first = get("FERRY_CUDA_WEIGHTS_EVICT_FIRST");
  e.cuda_act_levels = get("FERRY_CUDA_ACT_LEVELS");
  e.cuda_stamps = get("FERRY_CUDA_STAMPS");
  return e;
}

bool env_switch(const std::optional<std::string>& value, const char* name, bool fallback) {
  if (!value) return fallback;
  FERRY_CHECK(*value == "0" || *value == "1", "{}='{}': use 1 (on) or 0 (off)", name, *value);
  return *value == "1";
}

}  // namespace ferry
