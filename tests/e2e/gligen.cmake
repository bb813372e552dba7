# GLIGEN end to end (label e2e): tests/e2e/gligen.test.js runs CLIPTextEncode ->
# GLIGENTextBoxApply (GLIGENLoader) -> KSampler -> SaveImage with a tiny random GLIGEN model
# from gen_ckpt --gligen against the real latentd binary, and the wrong-file errors.
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd AND TARGET gen_ckpt)
  add_test(NAME e2e_gligen
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/gligen.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_gligen PROPERTIES LABELS e2e TIMEOUT 240
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
