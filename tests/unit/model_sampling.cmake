# The MODEL's sampling type and schedule (models/sampling/model_sampling.c: v-prediction,
# x0, img_to_img, zsnr) against float64 formulas written in the test and PyTorch values.
# Pure math: compiled from the sampling sources as test_sampling is.
file(GLOB model_sampling_test_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/models/sampling/*.c)
latentd_add_test(test_model_sampling
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_sampling.c
                         ${model_sampling_test_sources}
                 LIBS latentd_util m LABELS unit TIMEOUT 60)
target_include_directories(test_model_sampling PRIVATE ${PROJECT_SOURCE_DIR}/models/sampling)
