# The custom-sampling nodes (nodes/sampling/sd_sigmas_nodes.c, nodes/sampling/sd_custom_sampling.c): scheduler
# formulas against float64 transcriptions, sigma-list edits, and SamplerCustom(Advanced)
# against KSampler bit for bit on a generated tiny checkpoint (CPU).
latentd_add_test(test_sd_custom_sampling
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd_custom_sampling.c
                 LIBS latentd_nodes latentd_ckptgen LABELS unit TIMEOUT 120)
