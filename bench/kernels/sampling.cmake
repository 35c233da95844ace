# The CUDA sampling harness (bench/kernels/sampling_bench.cpp): built only with the CUDA backend.
if(FERRY_WITH_CUDA)
  add_executable(sampling_bench ${CMAKE_SOURCE_DIR}/bench/kernels/sampling_bench.cpp)
  target_link_libraries(sampling_bench PRIVATE ferry_cuda)
endif()
