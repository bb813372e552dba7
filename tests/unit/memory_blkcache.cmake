# The cpu device's cache of freed large blocks (memory/dev_blkcache.c).
latentd_add_test(test_memory_blkcache SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_memory_blkcache.c
                 LIBS latentd_memdev LABELS unit TIMEOUT 120)
