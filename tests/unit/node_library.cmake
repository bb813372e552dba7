# ComfyUI's latent and mask node families (nodes/sd_latent_*.c, nodes/nodes_mask*.c) run
# directly on small hand-checked tensors.
latentd_add_test(test_sd_latent_ops SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd_latent_ops.c
                 LIBS latentd_nodes LABELS unit TIMEOUT 60)
latentd_add_test(test_nodes_mask SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nodes_mask.c
                 LIBS latentd_nodes LABELS unit TIMEOUT 60)
latentd_add_test(test_sd_latent_io SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd_latent_io.c
                 LIBS latentd_nodes LABELS unit TIMEOUT 60)
latentd_add_test(test_nodes_image SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nodes_image.c
                 LIBS latentd_nodes LABELS unit TIMEOUT 60)
latentd_add_test(test_nodes_string SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nodes_string.c
                 LIBS latentd_nodes LABELS unit TIMEOUT 60)
