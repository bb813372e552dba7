# HypernetworkLoader (nodes/model/sd_attn_patch_nodes.c, unet.h attn_kv) on a tiny SD1.5
# checkpoint with the committed hypernetworks of tools/hypernetwork_fixtures.py (CPU).
latentd_add_test(test_sd_hypernetwork SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd_hypernetwork.c
                 LIBS latentd_nodes latentd_ckptgen ARGS ${PROJECT_SOURCE_DIR}/tests/fixtures/hypernetwork
                 LABELS unit TIMEOUT 120)
