# The cpu device's cache of freed large blocks (device/dev_blkcache.c).
latentd_add_test(test_device_blkcache SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_device_blkcache.c
                 LIBS latentd_device LABELS unit TIMEOUT 120)
