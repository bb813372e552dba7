# Several latentd processes on one PostgreSQL store (issue 18). The test starts a private
# PostgreSQL server (tests/e2e/lib/postgres.js: initdb in a temp dir, a Unix socket, run as
# the `postgres` user under root) and skips, saying why, when PostgreSQL is not installed.
# LATENTD_CLUSTER_PROMPTS sets how many prompts go through the three fronts (default 300, as issue 18 asks).
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd)
  add_test(NAME e2e_cluster_pg
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/cluster_pg.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_cluster_pg PROPERTIES LABELS e2e TIMEOUT 600
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
