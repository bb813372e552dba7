# ComfyUI's script_examples/*.py run unchanged against latentd (label e2e): they are read
# from a ComfyUI tree at test time (LATENTD_COMFYUI_DIR / LATENTD_COMFYUI_GIT, see the test),
# and need a Python with websocket-client (python3-websocket); the test skips without them.
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd AND TARGET gen_ckpt)
  add_test(NAME e2e_script_examples
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/script_examples.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_script_examples PROPERTIES LABELS e2e TIMEOUT 600
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9];﹣ ComfyUI script_examples")
endif()
