# Attention harness (prefill flash variants, split-KV decode, stream and graph timings):
# bench/kernels/attention_bench.cpp; torch SDPA on the same shapes: bench/kernels/sdpa_bench.py.
# Included from the top-level CMakeLists.txt; builds only with the CUDA backend.
if(FERRY_WITH_CUDA)
  add_executable(attention_bench ${CMAKE_CURRENT_LIST_DIR}/attention_bench.cpp)
  target_link_libraries(attention_bench PRIVATE ferry_cuda)
endif()
