# NCCL (optional): FERRY_NCCL_ROOT is a hint (a folder with include/nccl.h and lib/libnccl.so*, e.g. the
# nvidia-nccl-cu13 wheel unzipped, or /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl); the
# system paths are searched too. Sets FERRY_HAS_NCCL and the imported target ferry::nccl.
set(FERRY_NCCL_ROOT "" CACHE PATH "where NCCL is (include/nccl.h, lib/libnccl.so); empty: system paths")
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${FERRY_NCCL_ROOT} ENV NCCL_ROOT PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${FERRY_NCCL_ROOT} ENV NCCL_ROOT PATH_SUFFIXES lib lib64)
set(FERRY_HAS_NCCL OFF)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND FERRY_WITH_CUDA)
  add_library(ferry::nccl UNKNOWN IMPORTED)
  set_target_properties(ferry::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
  set(FERRY_HAS_NCCL ON)
  message(STATUS "ferry: NCCL ON (${NCCL_LIBRARY})")
else()
  message(STATUS "ferry: NCCL OFF (set FERRY_NCCL_ROOT to a folder with include/nccl.h and lib/libnccl.so; needs CUDA)")
endif()
