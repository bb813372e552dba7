# The regex string nodes (nodes/primitive/nodes_string_regex.c, py_re.c over PCRE2)
# against CPython re's results.
latentd_add_test(test_nodes_string_regex SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nodes_string_regex.c
                 LIBS latentd_nodes LABELS unit TIMEOUT 30)
