# Hardening (issue 11, item 2) end to end: request-sized allocations fail as ComfyUI-shaped
# out-of-memory execution_errors instead of aborting latentd, and a job running at two
# crashes is not run a third time. Needs gen_ckpt (tiny checkpoint). Label hardening:
# tools/test.sh also runs it against the ASan+UBSan build.
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd AND TARGET gen_ckpt)
  add_test(NAME e2e_hardening_oom
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec
                   ${CMAKE_CURRENT_LIST_DIR}/hardening_oom.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_hardening_oom PROPERTIES LABELS "e2e;hardening" TIMEOUT 240
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
