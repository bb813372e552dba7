# The attention model patches (HyperTile, SelfAttentionGuidance, PerpNeg) on a generated
# tiny checkpoint (CPU): one KSampler step each, and SAG over a LoRA, against float64
# steps through ref_unet64.c; HyperTile's draws against torch's values; SAG's blur map.
latentd_add_test(test_sd_patches
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd_patches.c
                         ${CMAKE_CURRENT_LIST_DIR}/ref_unet64.c
                 LIBS latentd_nodes latentd_ckptgen LABELS unit TIMEOUT 120)
