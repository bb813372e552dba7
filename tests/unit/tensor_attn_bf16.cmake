# The bf16 attention kernels (tensor/cpu/attn_amx.c, attn_avx512bf16.c) against float64,
# each where the CPU has it; skipped where it has neither.
latentd_add_test(test_tensor_attn_bf16 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tensor_attn_bf16.c
                 LIBS latentd_tensor LABELS unit TIMEOUT 120)
set_tests_properties(test_tensor_attn_bf16 PROPERTIES SKIP_RETURN_CODE 77)
