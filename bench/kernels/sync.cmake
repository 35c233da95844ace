# The grid-synchronization harness (bench/kernels/sync_bench.cu, its own kernels): built only with the CUDA
# backend, for the same targets (FERRY_CUDA_GENCODE).
if(FERRY_WITH_CUDA)
  add_executable(sync_bench ${CMAKE_SOURCE_DIR}/bench/kernels/sync_bench.cu)
  target_link_libraries(sync_bench PRIVATE ferry_cuda)
  target_include_directories(sync_bench PRIVATE ${CMAKE_SOURCE_DIR})  # dev/cuda/grid_barrier.cuh
  foreach(gencode ${FERRY_CUDA_GENCODE})
    target_compile_options(sync_bench PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-gencode=${gencode}>)
  endforeach()
endif()
