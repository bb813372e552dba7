# AlignYourStepsScheduler, the RescaleCFG / DualCFG / PerpNeg mixes (models/sampling/ays.c,
# guidance.c) against float64 references written in the test, and their nodes
# (nodes/sampling/sd_ays_nodes.c, sd_guider_nodes.c, nodes/model/sd_model_patch_nodes.c) on a generated tiny
# checkpoint (CPU).
latentd_add_test(test_sd_guidance SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd_guidance.c
                 LIBS latentd_nodes latentd_ckptgen LABELS unit TIMEOUT 120)
