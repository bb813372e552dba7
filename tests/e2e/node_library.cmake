# Latent and mask node families end to end (label e2e): /object_info against the fixtures from
# ComfyUI's nodes.py, nodes_latent.py and nodes_mask.py, and bad input through the server.
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd)
  add_test(NAME e2e_node_library
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/node_library.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_node_library PROPERTIES LABELS e2e TIMEOUT 120
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
