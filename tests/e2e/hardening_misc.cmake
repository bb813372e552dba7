# Hardening (issue 11) end-to-end tests: one database per server, atomic output files,
# strict JSON bodies. Label hardening: tools/test.sh also runs them against the ASan+UBSan
# build.
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd)
  add_test(NAME e2e_hardening_misc
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec
                   ${CMAKE_CURRENT_LIST_DIR}/hardening_misc.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_hardening_misc PROPERTIES LABELS "e2e;hardening" TIMEOUT 180
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
