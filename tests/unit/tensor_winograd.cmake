# tensor/cpu Winograd F(2x2, 3x3) convolution (issue 15) against a float64 direct
# convolution and the im2col + GEMM reference path (label unit).
latentd_add_test(test_tensor_winograd SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tensor_winograd.c
                 LIBS latentd_tensor LABELS unit TIMEOUT 120)
