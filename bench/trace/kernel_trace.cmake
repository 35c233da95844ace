# The kernel-timeline injection library (bench/trace/kernel_trace.cpp): built with the CUDA backend when the
# toolkit has CUPTI (FindCUDAToolkit's CUDA::cupti). Loaded at run time through CUDA_INJECTION64_PATH.
if(FERRY_WITH_CUDA AND TARGET CUDA::cupti)
  add_library(ferry_kernel_trace SHARED ${CMAKE_SOURCE_DIR}/bench/trace/kernel_trace.cpp)
  target_link_libraries(ferry_kernel_trace PRIVATE CUDA::cupti)
  set_target_properties(ferry_kernel_trace PROPERTIES CXX_VISIBILITY_PRESET hidden)
endif()
