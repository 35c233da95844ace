# src/dist (tensor parallelism): communicators, the sharding plan, the launcher. Included by CMakeLists.txt
# after the CUDA block. NCCL is optional: without it, --tp N runs on the CPU only (threads). MPI (mpirun across hosts) is not
# wired yet: the single-host launcher starts the ranks.
include(${CMAKE_CURRENT_LIST_DIR}/FindNCCL.cmake)
ferry_library(ferry_dist dist)
ferry_link(ferry_dist ferry_model)
if(FERRY_HAS_NCCL)
  ferry_link(ferry_dist ferry::nccl ferry_cuda)
  target_compile_definitions(ferry_dist PUBLIC FERRY_HAS_NCCL)
endif()
ferry_link(ferry_engine ferry_dist)
