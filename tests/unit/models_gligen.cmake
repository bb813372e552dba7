# models/gligen: GLIGEN's position net and fusers against a float64 reference written in
# the test, the tiny SD1.5 UNet with them as its middle patch (ref_unet64.c), bad files.
latentd_add_test(test_models_gligen
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_models_gligen.c
                         ${CMAKE_CURRENT_LIST_DIR}/ref_unet64.c
                 LIBS latentd_ckptgen latentd_models LABELS unit TIMEOUT 120)
