# The SDE samplers' Brownian-tree noise (models/sampling/brownian.c) against torchsde's
# own results (brownian_fixture.h, from tools/brownian_reference.py). Compiled from its
# two sources, like test_sampling, so it does not wait on the rest of models/.
latentd_add_test(test_sampling_brownian
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sampling_brownian.c
                         ${PROJECT_SOURCE_DIR}/models/sampling/brownian.c
                         ${PROJECT_SOURCE_DIR}/models/sampling/rng.c
                 LIBS latentd_util m LABELS unit TIMEOUT 30)
target_include_directories(test_sampling_brownian PRIVATE ${PROJECT_SOURCE_DIR}/models/sampling)
