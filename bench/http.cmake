# bench/http: latentd vs a minimal libmicrohttpd handler under wrk, plus start-up time and
# idle RSS. One command: `cmake --build <build> --target bench_http` (or bench/http/run.sh).
pkg_check_modules(BENCH_MHD IMPORTED_TARGET libmicrohttpd)
if(BENCH_MHD_FOUND)
  add_executable(bench_http_mhd ${CMAKE_CURRENT_LIST_DIR}/http/mhd_minimal.c)
  target_link_libraries(bench_http_mhd PRIVATE PkgConfig::BENCH_MHD Threads::Threads)
  set_target_properties(bench_http_mhd PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
  if(TARGET latentd)
    add_custom_target(bench_http
      COMMAND ${CMAKE_CURRENT_LIST_DIR}/http/run.sh ${PROJECT_BINARY_DIR}
      DEPENDS latentd bench_http_mhd USES_TERMINAL)
  endif()
endif()
