# The prefill GEMM harness (bench/kernels/gemm_bench.cpp): ferry's Hopper GEMM vs cuBLASLt. CUDA builds only.
if(FERRY_WITH_CUDA)
  add_executable(gemm_bench ${CMAKE_CURRENT_LIST_DIR}/gemm_bench.cpp)
  target_link_libraries(gemm_bench PRIVATE ferry_cuda ferry_cpu)
endif()
