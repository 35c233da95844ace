# The wgmma skinny GEMM harness (bench/kernels/wgmma_skinny_bench.cpp): ferry's wgmma skinny GEMM vs cuBLASLt, the
# mma.sync skinny GEMM and the Hopper GEMM at n = 32..255.
if(FERRY_WITH_CUDA)
  add_executable(wgmma_skinny_bench ${CMAKE_CURRENT_LIST_DIR}/wgmma_skinny_bench.cpp)
  target_link_libraries(wgmma_skinny_bench PRIVATE ferry_cuda)
endif()
