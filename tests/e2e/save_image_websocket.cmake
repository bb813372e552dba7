# SaveImageWebsocket end to end (label e2e): binary PNG frames between the node's `executing`
# and the next, as ComfyUI's websockets_api_example_ws_images.py collects them, and its
# /object_info entry against the fixture from ComfyUI's custom_nodes/websocket_image_save.py.
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd)
  add_test(NAME e2e_save_image_websocket
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/save_image_websocket.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_save_image_websocket PROPERTIES LABELS e2e TIMEOUT 120
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
