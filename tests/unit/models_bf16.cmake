# bf16 compute on the tiny and small random checkpoints (issue 15): UNet eps relative
# error and decoded-image PSNR against fp32, the precision scope of the patcher.
latentd_add_test(test_models_bf16 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_models_bf16.c
                 LIBS latentd_ckptgen latentd_models LABELS unit TIMEOUT 60)
