# Model merging and saving (nodes/model/sd_merge_nodes.c, nodes/model/sd_save_nodes.c,
# models/checkpoint_save.c) on generated tiny SD1.5 / SDXL checkpoints (CPU).
latentd_add_test(test_sd_merge SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd_merge.c
                 LIBS latentd_nodes latentd_ckptgen LABELS unit TIMEOUT 120)
