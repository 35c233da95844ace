# The CUDA mixture-of-experts FFN harness (bench/kernels/moe_ffn_bench.cpp): built only with the CUDA backend.
if(FERRY_WITH_CUDA)
  add_executable(moe_ffn_bench ${CMAKE_SOURCE_DIR}/bench/kernels/moe_ffn_bench.cpp)
  target_link_libraries(moe_ffn_bench PRIVATE ferry_cuda)
endif()
