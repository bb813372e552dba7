# latentd_add_layer(<target> DIR <dir>... SOURCES ... DEPS ...)
#
# A layer is a static library whose public include directory is its own folder
# only, so that a header of a higher layer is not on the include path of a lower
# one (an upward #include fails to build).  A layer with no sources yet becomes
# an INTERFACE library so that the tree always configures.
function(latentd_add_layer target)
  cmake_parse_arguments(L "" "" "DIR;SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  if(L_SOURCES)
    add_library(${target} STATIC ${L_SOURCES})
    target_include_directories(${target} PUBLIC ${L_DIR})
    target_link_libraries(${target} PUBLIC ${L_DEPS} PRIVATE ${L_PRIVATE_DEPS})
  else()
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE ${L_DIR})
    target_link_libraries(${target} INTERFACE ${L_DEPS})
  endif()
endfunction()

# latentd_add_test(<name> SOURCES ... LIBS ... [LABELS ...] [TIMEOUT s] [ARGS ...])
# One executable per module; exit code 77 means "skipped".
function(latentd_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${T_LIBS})
  add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  # A sanitized Debug build runs the same work 3-10x slower (test_models_fwd: 6 s release,
  # 60-180 s under ASan on 2 busy cores): the limit catches hangs, not slowness.
  if(LATENTD_SANITIZE)
    math(EXPR T_TIMEOUT "${T_TIMEOUT} * 4")
  endif()
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}"
                       SKIP_RETURN_CODE 77)
endfunction()
