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
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()

# The SQLite e2e API tests again, each server on a PostgreSQL store (LATENTD_E2E_STORE=pg in
# lib/latentd.js: a private server per test file, a database per server directory). Without
# PostgreSQL the helper says so and exits 77, which node --test reports as a failure of the
# file: the message is what CTest matches as a skip. persist and cli test the SQLite file.
if(LATENTD_NODE_EXE AND TARGET latentd)
  foreach(t routes files ws bad preview)
    add_test(NAME e2e_server_${t}_pg
             COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/server_${t}.test.js
             WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
    set_tests_properties(e2e_server_${t}_pg PROPERTIES LABELS e2e TIMEOUT 180
      ENVIRONMENT "LATENTD_E2E_STORE=pg;LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt"
      SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9];PostgreSQL is unavailable")
  endforeach()
endif()
