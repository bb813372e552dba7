# Concat-conditioned UNets end to end (label e2e): tests/e2e/concat_models.test.js runs an
# inpainting workflow (LoadImage + its alpha mask -> InpaintModelConditioning -> KSampler ->
# SaveImage) on tiny 9-channel SD1.5 and SD2 checkpoints and an InstructPixToPixConditioning
# one on an 8-channel SD1.5 (gen_ckpt --in-channels), /object_info against ComfyUI's entries,
# and refused files as node errors with the server going on.
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd AND TARGET gen_ckpt)
  add_test(NAME e2e_concat_models
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec
                   ${CMAKE_CURRENT_LIST_DIR}/concat_models.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_concat_models PROPERTIES LABELS e2e TIMEOUT 300
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
