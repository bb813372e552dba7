# Sampling math (models/sampling): noise, schedulers, samplers, previews.
# The sampling sources are pure math over float arrays, so the test compiles them
# directly instead of linking latentd_models: it then builds and runs even while
# the rest of models/ (tensors, UNet, ...) is being written.
file(GLOB sampling_test_lib_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/models/sampling/*.c)
latentd_add_test(test_sampling
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sampling.c
                         ${CMAKE_CURRENT_LIST_DIR}/test_sampling_ref.c
                         ${CMAKE_CURRENT_LIST_DIR}/test_sampling_ref_ext.c
                         ${sampling_test_lib_sources}
                 LIBS latentd_util m LABELS unit TIMEOUT 120)
target_include_directories(test_sampling PRIVATE ${PROJECT_SOURCE_DIR}/models/sampling)

# The SD1.5 latent and sampler nodes (nodes/sd_*.c) on an analytic MODEL backend.
latentd_add_test(test_sd_nodes SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd_nodes.c
                 LIBS latentd_nodes LABELS unit TIMEOUT 120)

# The default txt2img workflow at node level on a generated tiny checkpoint (CPU).
latentd_add_test(test_sd_pipeline SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd_pipeline.c
                 LIBS latentd_nodes latentd_ckptgen LABELS unit TIMEOUT 120)
