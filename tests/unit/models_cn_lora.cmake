# models/controlnet: a Control-LoRA made into a ControlNet for a UNet against the float64
# reference ControlNet of the merged weights (ref_unet64.c); bad files.
latentd_add_test(test_models_cn_lora
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_models_cn_lora.c
                         ${CMAKE_CURRENT_LIST_DIR}/ref_unet64.c
                 LIBS latentd_ckptgen latentd_models LABELS unit TIMEOUT 120)
