# tensor/: CPU ops against naive references (label unit); the CUDA comparison test
# (label cuda) exists only in CUDA builds and skips (77) without a GPU.
latentd_add_test(test_tensor_cpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tensor_cpu.c
                 LIBS latentd_tensor LABELS unit TIMEOUT 120)
if(LATENTD_HAVE_CUDA AND EXISTS ${CMAKE_CURRENT_LIST_DIR}/test_tensor_cuda.c)
  latentd_add_test(test_tensor_cuda SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tensor_cuda.c
                   LIBS latentd_tensor LABELS cuda TIMEOUT 300)
endif()
