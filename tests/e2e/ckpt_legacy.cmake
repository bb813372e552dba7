# PyTorch .ckpt/.pt files end to end (label e2e): tests/e2e/ckpt_legacy.test.js converts
# gen_ckpt's tiny checkpoint, a LoRA and a VAE with tools/pt_write.py (python3, standard
# library only) and compares each with its .safetensors twin through the real latentd.
find_program(LATENTD_NODE_EXE node)
find_package(Python3 COMPONENTS Interpreter)
if(LATENTD_NODE_EXE AND Python3_Interpreter_FOUND AND TARGET latentd AND TARGET gen_ckpt)
  add_test(NAME e2e_ckpt_legacy
           COMMAND ${LATENTD_NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_LIST_DIR}/ckpt_legacy.test.js
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(e2e_ckpt_legacy PROPERTIES LABELS e2e TIMEOUT 240
    ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt;LATENTD_PYTHON=${Python3_EXECUTABLE}"
    SKIP_REGULAR_EXPRESSION "ℹ skipped [1-9]")
endif()
