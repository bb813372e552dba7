latentd_add_test(test_nodes SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nodes.c
                 LIBS latentd_graph LABELS unit TIMEOUT 120)
