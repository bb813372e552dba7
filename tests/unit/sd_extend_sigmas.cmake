# ExtendIntermediateSigmas (nodes/sampling/sd_sigmas_nodes.c): against a float64 transcription
# and against torch's output for ComfyUI's code (hex floats in the test).
latentd_add_test(test_sd_extend_sigmas SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd_extend_sigmas.c
                 LIBS latentd_nodes m LABELS unit TIMEOUT 30)
