# Upscale models end to end (label e2e): tests/e2e/upscale_model.test.js runs a hires-fix
# workflow with a tiny random ESRGAN / SRVGG (gen_upscale) against the real latentd binary.
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd AND TARGET gen_ckpt AND TARGET gen_upscale)
  add_test(NAME e2e_upscale_model
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/upscale_model.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_upscale_model PROPERTIES LABELS e2e TIMEOUT 180
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt;LATENTD_GEN_UPSCALE=${PROJECT_BINARY_DIR}/gen_upscale"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
