# The SD1.5 UNet (tiny generated checkpoint) streamed by the memory manager on sim
# devices at 100/50/25/5 % budgets: identical outputs, peak within budget, no leaks.
latentd_add_test(test_memory_sd15 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_memory_sd15.c
                 LIBS latentd_ckptgen latentd_models LABELS unit TIMEOUT 120)
