# CMake generated Testfile for 
# Source directory: /work/main/tests
# Build directory: /work/main/build/tests
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test([=[test_util]=] "/work/main/build/tests/test_util")
set_tests_properties([=[test_util]=] PROPERTIES  LABELS "unit" SKIP_RETURN_CODE "77" TIMEOUT "120" _BACKTRACE_TRIPLES "/work/main/cmake/latentd.cmake;27;add_test;/work/main/tests/unit/util.cmake;1;latentd_add_test;/work/main/tests/unit/util.cmake;0;;/work/main/tests/CMakeLists.txt;7;include;/work/main/tests/CMakeLists.txt;0;")
