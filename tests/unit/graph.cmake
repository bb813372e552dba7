latentd_add_test(test_graph SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_graph.c
                 LIBS latentd_graph LABELS unit TIMEOUT 120)
target_compile_definitions(test_graph PRIVATE LATENTD_FIXTURES_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures")
