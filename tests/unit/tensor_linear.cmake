# tensor/cpu/linear.c + gemm_wt.c (issue 15): Linear and Linear+GEGLU on each tiling path
# against float64, f16/bf16 weights bit-identical to their f32 widening, W^T widening.
latentd_add_test(test_tensor_linear SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tensor_linear.c
                 LIBS latentd_tensor LABELS unit TIMEOUT 60)
