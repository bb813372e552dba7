# The AMX bf16 GEMM kernel (tensor/cpu/gemm_amx.c) against float64; skipped without AMX.
latentd_add_test(test_tensor_amx SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tensor_amx.c
                 LIBS latentd_tensor LABELS unit TIMEOUT 120)
set_tests_properties(test_tensor_amx PROPERTIES SKIP_RETURN_CODE 77)
