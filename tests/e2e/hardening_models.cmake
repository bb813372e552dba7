# Model files changing under a running server (issue 11): tests/e2e/hardening_models.test.js
# overwrites a loaded tiny checkpoint in place while idle (the next prompt uses the new
# weights), truncates it mid-run (a node error, not SIGBUS) and checks that load errors
# name files relative to their models folder. Needs Node 20 and `npm ci` in tests/ (ws).
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd AND TARGET gen_ckpt)
  add_test(NAME e2e_hardening_models
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/hardening_models.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_hardening_models PROPERTIES LABELS "e2e;hardening" TIMEOUT 300
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt"
    # node:test exits 0 for a skipped test; report it to CTest as skipped, not passed.
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
