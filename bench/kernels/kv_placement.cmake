# KV placement harness (does a decode step's attention care where its blocks sit in a large cache?):
# bench/kernels/kv_placement_bench.cpp. Builds only with the CUDA backend.
if(FERRY_WITH_CUDA)
  add_executable(kv_placement_bench ${CMAKE_CURRENT_LIST_DIR}/kv_placement_bench.cpp)
  target_link_libraries(kv_placement_bench PRIVATE ferry_cuda)
endif()
