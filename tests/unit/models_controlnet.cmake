# models/controlnet: a tiny random ControlNet's residuals and the UNet with them against a
# float64 reference written in the test; loading (namings, families, diff) and bad files.
latentd_add_test(test_models_controlnet
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_models_controlnet.c
                         ${CMAKE_CURRENT_LIST_DIR}/ref_unet64.c
                 LIBS latentd_ckptgen latentd_models LABELS unit TIMEOUT 120)
