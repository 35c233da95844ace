# allreduce_bench: the collectives of one tensor-parallel decode step (NCCL, all visible GPUs of one process)
# next to ferry's one-shot peer all-reduce (backends/cuda/peer_all_reduce.h, hence ferry_cuda), captured in
# CUDA graphs and replayed: the all-reduce time per step that `ferry bench --tp N` pays.
if(FERRY_WITH_CUDA AND FERRY_HAS_NCCL)
  add_executable(allreduce_bench ${CMAKE_CURRENT_LIST_DIR}/allreduce_bench.cpp)
  target_link_libraries(allreduce_bench PRIVATE ferry_cuda ferry::nccl CUDA::cudart_static)
endif()
