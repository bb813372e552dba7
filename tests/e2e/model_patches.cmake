# Attention model patches end to end (label e2e): tests/e2e/model_patches.test.js runs
# SelfAttentionGuidance, HyperTile and PerpNeg in KSampler graphs on a tiny gen_ckpt file
# against the real latentd binary (and SAG's no-grid error).
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE AND TARGET latentd AND TARGET gen_ckpt)
  add_test(NAME e2e_model_patches
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/model_patches.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_model_patches PROPERTIES LABELS e2e TIMEOUT 300
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
