# The CUDA decode matvec harness (bench/kernels/matvec_bench.cpp): built only with the CUDA backend.
if(FERRY_WITH_CUDA)
  add_executable(matvec_bench ${CMAKE_SOURCE_DIR}/bench/kernels/matvec_bench.cpp)
  target_link_libraries(matvec_bench PRIVATE ferry_cuda ferry_cpu CUDA::cublas)
endif()
