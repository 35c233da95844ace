# src/parallel (tensor parallelism): communicators, the sharding plan, the launcher. Included by CMakeLists.txt
# after the CUDA block. NCCL is optional: without it, --tp N runs on the CPU only (threads); mpirun needs no MPI
# library (parallel/launcher.h).
include(${CMAKE_CURRENT_LIST_DIR}/FindNCCL.cmake)
ferry_library(ferry_parallel parallel)
ferry_link(ferry_parallel ferry_model)
if(FERRY_HAS_NCCL)
  ferry_link(ferry_parallel ferry::nccl ferry_cuda)
  target_compile_definitions(ferry_parallel PUBLIC FERRY_HAS_NCCL)
endif()
ferry_link(ferry_engine ferry_parallel)
