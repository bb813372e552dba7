# nodes/sd_backend's SDXL conditioning builders (CLIPTextEncode, CLIPTextEncodeSDXL) on a
# tiny generated SDXL against tools/reference_sdxl.py's fixtures.
latentd_add_test(test_sd_sdxl_ref SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sd_sdxl_ref.c
                 LIBS latentd_nodes latentd_ckptgen
                 ARGS ${PROJECT_SOURCE_DIR}/tests/fixtures/models LABELS unit TIMEOUT 120)
