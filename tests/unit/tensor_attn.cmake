# tensor/cpu attention (issue 15): the fused AVX-512 kernel and the blocked-sgemm
# reference path against a float64 naive attention (label unit).
latentd_add_test(test_tensor_attn SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tensor_attn.c
                 LIBS latentd_tensor LABELS unit TIMEOUT 120)
