# bench/serve: serve_bench, a load generator for `ferry serve` (or any OpenAI-compatible server).

if(TARGET ferry_server)
  add_executable(serve_bench ${CMAKE_CURRENT_LIST_DIR}/serve_bench.cpp ${CMAKE_CURRENT_LIST_DIR}/load_client.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/workload.cpp)
  target_link_libraries(serve_bench PRIVATE ferry_server CLI11::CLI11)
endif()
