# The CUDA fused memory-bound ops harness (bench/kernels/fused_ops_bench.cpp): built only with the CUDA backend.
if(FERRY_WITH_CUDA)
  add_executable(fused_ops_bench ${CMAKE_SOURCE_DIR}/bench/kernels/fused_ops_bench.cpp)
  target_link_libraries(fused_ops_bench PRIVATE ferry_cuda)
endif()
