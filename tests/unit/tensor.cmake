# tensor/: CPU ops against naive references (label unit); the CUDA comparison test
# (label cuda) exists only in CUDA builds and skips (77) without a GPU.
latentd_add_test(test_tensor_cpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tensor_cpu.c
                 LIBS latentd_tensor LABELS unit TIMEOUT 120)
if(LATENTD_HAVE_CUDA AND EXISTS ${CMAKE_CURRENT_LIST_DIR}/test_tensor_cuda.c)
  latentd_add_test(test_tensor_cuda SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tensor_cuda.c
                   LIBS latentd_tensor LABELS cuda TIMEOUT 300)
endif()
# f16/bf16 weights widened inside linear/GEGLU/matmul/conv (tensor/cpu/widen.c, issue 15):
# bit-identical to f32-widened weights, near float64, the scratch's size and release.
latentd_add_test(test_tensor_widen SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tensor_widen.c
                 LIBS latentd_tensor LABELS unit TIMEOUT 60)
# bf16 compute of the GEMM ops (tensor_precision.h, issue 15): float64 references with
# the stated bounds, RNE ties, the weight cache and its invalidation.
latentd_add_test(test_tensor_bf16 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tensor_bf16.c
                 LIBS latentd_tensor LABELS unit TIMEOUT 60)
# The same checks on the path a CPU without AVX-512 BF16/AMX takes (operands rounded,
# fp32 GEMM), forced here.
add_test(NAME test_tensor_bf16_emulated COMMAND test_tensor_bf16)
set_tests_properties(test_tensor_bf16_emulated PROPERTIES ENVIRONMENT LATENTD_BF16_PATH=emulated
                     TIMEOUT 60 LABELS unit SKIP_RETURN_CODE 77)
# With kept bf16 copies (LATENTD_BF16_CACHE_MB > 0; the default rounds weights per op).
add_test(NAME test_tensor_bf16_cached COMMAND test_tensor_bf16)
set_tests_properties(test_tensor_bf16_cached PROPERTIES ENVIRONMENT LATENTD_BF16_CACHE_MB=64
                     TIMEOUT 60 LABELS unit)
