# SDXL base and refiner (tiny generated checkpoints) against the float64 reference
# tools/reference_sdxl.py wrote from shared/spec/sdxl.md (fixtures in tests/fixtures/models).
latentd_add_test(test_models_sdxl_ref SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_models_sdxl_ref.c
                 LIBS latentd_ckptgen latentd_models PkgConfig::CJSON
                 ARGS ${PROJECT_SOURCE_DIR}/tests/fixtures/models
                      ${PROJECT_SOURCE_DIR}/models/data/sd1_tokenizer
                 LABELS unit TIMEOUT 120)
