# Prefill-side CUDA kernel harness (attention, GEMM): bench/kernels/prefill_kernels_bench.cpp.
# Included from the top-level CMakeLists.txt; builds only with the CUDA backend.
if(FERRY_WITH_CUDA)
  add_executable(prefill_kernels_bench ${CMAKE_CURRENT_LIST_DIR}/prefill_kernels_bench.cpp)
  target_link_libraries(prefill_kernels_bench PRIVATE ferry_cuda ferry_cpu CUDA::cublas)
endif()
