# server/srv_precision: ComfyUI's dtype flags (--bf16-unet, --force-fp32, ...) -> per-model
# GEMM precision, with argparse's group conflicts (issue 15). Only the config parser is
# linked, so the test needs no model code.
latentd_add_test(test_srv_precision
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_srv_precision.c ${PROJECT_SOURCE_DIR}/server/srv_config.c
          ${PROJECT_SOURCE_DIR}/server/srv_precision.c ${PROJECT_SOURCE_DIR}/server/srv_path.c
  LIBS latentd_memory latentd_util LABELS unit TIMEOUT 30)
target_include_directories(test_srv_precision PRIVATE ${PROJECT_SOURCE_DIR}/server
                           ${PROJECT_SOURCE_DIR}/graph)
