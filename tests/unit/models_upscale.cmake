# models/upscale: ESRGAN (both namings, x1-x8) and SRVGGNetCompact against a float64
# reference, ComfyUI's tiling, the tensor ops they added, refused files.
latentd_add_test(test_models_upscale SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_models_upscale.c
                 LIBS latentd_upsgen latentd_models LABELS unit TIMEOUT 60)
