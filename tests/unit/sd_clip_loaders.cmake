# CLIPLoader and DualCLIPLoader (nodes/model/sd_clip_loader_nodes.c, models/checkpoint_text.c)
# on generated tiny standalone text encoders against the same checkpoints' CLIPs (CPU).
latentd_add_test(test_sd_clip_loaders SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd_clip_loaders.c
                 LIBS latentd_nodes latentd_ckptgen LABELS unit TIMEOUT 120)
