# models/controlnet: T2I-Adapters (full, light, SDXL) against a float64 reference written
# in the test, the UNet with their features in its input blocks (ref_unet64.c), bad files.
latentd_add_test(test_models_t2i
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_models_t2i.c
                         ${CMAKE_CURRENT_LIST_DIR}/ref_unet64.c
                 LIBS latentd_ckptgen latentd_models LABELS unit TIMEOUT 120)
