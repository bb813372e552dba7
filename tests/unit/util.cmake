latentd_add_test(test_util SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_util.c LIBS latentd_util)
