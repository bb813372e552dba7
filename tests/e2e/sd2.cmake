# SD2.x end to end (label e2e): tests/e2e/sd2.test.js runs ComfyUI's default workflow on tiny
# gen_ckpt --arch sd2-v / sd2 checkpoints against the real latentd binary (v-prediction
# detected, ModelSamplingDiscrete, an SD2 LoRA on SD1.5 refused).
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd AND TARGET gen_ckpt)
  add_test(NAME e2e_sd2
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/sd2.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_sd2 PROPERTIES LABELS e2e TIMEOUT 300
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
