# The SDXL UNet (tiny generated checkpoint, ADM input) streamed by the memory manager on
# sim devices at 100/50/25 % budgets: identical outputs, peak within budget, no leaks
# (the twin of memory_sd15.cmake; both use tests/unit/memory_unet.h).
latentd_add_test(test_memory_sdxl SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_memory_sdxl.c
                 LIBS latentd_ckptgen latentd_models LABELS unit TIMEOUT 120)
