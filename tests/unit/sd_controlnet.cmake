# The ControlNet nodes and KSampler with them on a generated tiny checkpoint and ControlNet
# (CPU): percent windows against ComfyUI's formula, chaining, strength 0, bad input.
latentd_add_test(test_sd_controlnet SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd_controlnet.c
                 LIBS latentd_nodes latentd_ckptgen LABELS unit TIMEOUT 120)
