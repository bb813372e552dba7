# Device part of memory/: cpu and sim devices (CUDA cases skip without a GPU).
latentd_add_test(test_memory_dev SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_memory_dev.c
                 LIBS latentd_memdev LABELS unit TIMEOUT 120)
