# CPU matmul harness (bench/kernels/cpu_matmul_bench.cpp): CpuBackend::matmul on SmolLM2-135M layer shapes.
add_executable(cpu_matmul_bench ${CMAKE_CURRENT_LIST_DIR}/cpu_matmul_bench.cpp)
target_link_libraries(cpu_matmul_bench PRIVATE ferry_cpu)
target_include_directories(cpu_matmul_bench PRIVATE ${CMAKE_SOURCE_DIR}/src)
