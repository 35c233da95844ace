# bench/serve: serve_bench, a load generator for `ferry serve` (or any OpenAI-compatible server).
#
# cpp-httplib on Debian is a compiled library (libcpp-httplib.so, built with OpenSSL/zlib/brotli support): its
# header must be compiled with the same -D flags and the library linked, else the Request/Client layouts differ
# from the library's. pkg-config gives both. Until the top-level CMakeLists.txt does this for ferry_server,
# it is done here (this file is included after ferry_server is defined).
if(TARGET ferry_server)
  pkg_check_modules(CPP_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
  get_target_property(_ferry_server_libs ferry_server LINK_LIBRARIES)
  if(NOT "PkgConfig::CPP_HTTPLIB" IN_LIST _ferry_server_libs)
    target_link_libraries(ferry_server PUBLIC PkgConfig::CPP_HTTPLIB)
  endif()
  add_executable(serve_bench ${CMAKE_CURRENT_LIST_DIR}/serve_bench.cpp ${CMAKE_CURRENT_LIST_DIR}/load_client.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/workload.cpp)
  target_link_libraries(serve_bench PRIVATE ferry_server CLI11::CLI11)
endif()
