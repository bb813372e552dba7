# SaveAnimatedPNG, LoadImageOutput and ImageQuantize end to end (label e2e): /object_info against
# ComfyUI's fixtures, the APNG through /view, an output image read back by its [output] name.
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd)
  add_test(NAME e2e_image_anim
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/image_anim.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_image_anim PROPERTIES LABELS e2e TIMEOUT 120
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
