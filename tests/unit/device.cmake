# device/: cpu and sim devices (CUDA cases skip without a GPU).
latentd_add_test(test_device SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_device.c
                 LIBS latentd_device LABELS unit TIMEOUT 120)
