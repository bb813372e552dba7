# e2e_hardening_http (labels e2e, hardening): slow-client flood, request deadlines, 413s, caps
# and WebSocket handshake errors against the real latentd binary (issue 11, item 1).
# Needs Node 20 and `npm ci` in tests/ (ws). The flood holds 2000+ sockets: the node process
# needs a descriptor limit above that (`ulimit -n`; latentd gets its own through `nofile`).
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd)
  add_test(NAME e2e_hardening_http
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/hardening_http.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_hardening_http PROPERTIES LABELS "e2e;hardening" TIMEOUT 180
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
