# CPU activation-quantizer harness (bench/kernels/cpu_quantize_bench.cpp): quantize_activations, 128 x 1536.
add_executable(cpu_quantize_bench ${CMAKE_CURRENT_LIST_DIR}/cpu_quantize_bench.cpp)
target_link_libraries(cpu_quantize_bench PRIVATE ferry_cpu)
target_include_directories(cpu_quantize_bench PRIVATE ${CMAKE_SOURCE_DIR}/src)
