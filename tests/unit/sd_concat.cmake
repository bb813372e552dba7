# The concat-conditioned UNets (inpainting 9 channels, instruct-pix2pix 8; issues 13 and 14):
# detection, the UNet against the float64 reference (ref_unet64.c), c_concat
# (nodes/sampling/sd_concat.c) and the sampler's use of it against values computed in the
# test, InpaintModelConditioning / InstructPixToPixConditioning on tiny checkpoints (CPU).
latentd_add_test(test_sd_concat
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd_concat.c
                         ${CMAKE_CURRENT_LIST_DIR}/ref_unet64.c
                 LIBS latentd_nodes latentd_ckptgen LABELS unit TIMEOUT 120)
