# The fused-projection harness (bench/kernels/fusion_bench.cpp): built only with the CUDA backend.
if(FERRY_WITH_CUDA)
  add_executable(fusion_bench ${CMAKE_SOURCE_DIR}/bench/kernels/fusion_bench.cpp)
  target_link_libraries(fusion_bench PRIVATE ferry_cuda)
endif()
