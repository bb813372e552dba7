# models/controlnet: the Union ControlNet's residuals (per control type, and "auto")
# against the float64 reference (ref_unet64.c); loading its diffusers files; a type out
# of a 6-type Union's range and a Union without task_embedding fail clearly.
latentd_add_test(test_models_cn_union
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_models_cn_union.c
                         ${CMAKE_CURRENT_LIST_DIR}/ref_unet64.c
                 LIBS latentd_ckptgen latentd_models LABELS unit TIMEOUT 120)
