# SD2.x (models/family/family_sd2.c): detection of the 512 and 768-v tiny checkpoints, the
# OpenCLIP-H conditioning and one v-prediction denoise step against the float64 reference
# tools/reference_sd2.py (fixtures in tests/fixtures/models).
latentd_add_test(test_sd2 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd2.c
                 LIBS latentd_nodes latentd_ckptgen
                 ARGS ${PROJECT_SOURCE_DIR}/tests/fixtures/models LABELS unit TIMEOUT 120)
