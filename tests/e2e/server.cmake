# server/ end-to-end tests (label e2e): node:test files run against the real latentd binary
# (started by tests/e2e/lib/latentd.js on 127.0.0.1, --port 0, a temp base directory).
# Needs Node 20 and `npm ci` in tests/ (ws).
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd)
  foreach(t routes files ws persist bad cli preview)
    set(f ${CMAKE_CURRENT_LIST_DIR}/server_${t}.test.js)
    if(EXISTS ${f})
      add_test(NAME e2e_server_${t} COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${f}
               WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
      set_tests_properties(e2e_server_${t} PROPERTIES LABELS e2e TIMEOUT 180
        ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt"
        # node:test exits 0 for a skipped test; report it to CTest as skipped, not passed.
        SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
    endif()
  endforeach()
endif()
