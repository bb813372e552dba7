# List I/O in the executor (INPUT_IS_LIST / OUTPUT_IS_LIST) and the rebatch nodes.
latentd_add_test(test_graph_lists SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_graph_lists.c
                 LIBS latentd_graph LABELS unit TIMEOUT 30)
