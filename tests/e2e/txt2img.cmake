# Text-to-image end to end (label e2e): tests/e2e/txt2img.test.js runs the default workflow
# with a tiny gen_ckpt checkpoint against the real latentd binary (HTTP + WS, cache, seeds,
# interrupt, bad and truncated checkpoints). Needs Node 20 and `npm ci` in tests/ (ws).
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd AND TARGET gen_ckpt)
  add_test(NAME e2e_txt2img
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/txt2img.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_txt2img PROPERTIES LABELS e2e TIMEOUT 180
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt"
    # node:test exits 0 for a skipped test; report it to CTest as skipped, not passed.
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
