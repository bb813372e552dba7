# ControlNet end to end (label e2e): tests/e2e/controlnet.test.js runs LoadImage ->
# ControlNetLoader -> ControlNetApplyAdvanced -> KSampler -> SaveImage with a tiny random
# ControlNet from gen_ckpt --controlnet against the real latentd binary.
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd AND TARGET gen_ckpt)
  add_test(NAME e2e_controlnet
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/controlnet.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_controlnet PROPERTIES LABELS e2e TIMEOUT 240
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
