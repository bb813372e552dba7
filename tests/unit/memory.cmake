# memory/ (planner, patcher, streamer) on the sim device.
latentd_add_test(test_memory SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_memory.c
                 LIBS latentd_memory LABELS unit TIMEOUT 120)
