# The skinny GEMM harness (bench/kernels/skinny_gemm_bench.cpp): ferry's skinny GEMM vs cuBLASLt at n = 8..128.
if(FERRY_WITH_CUDA)
  add_executable(skinny_gemm_bench ${CMAKE_CURRENT_LIST_DIR}/skinny_gemm_bench.cpp)
  target_link_libraries(skinny_gemm_bench PRIVATE ferry_cuda)
endif()
