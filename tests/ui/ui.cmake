# UI tests (label ui): playwright-core drives Debian's Chromium against a real latentd.
# Each test file is run by tests/ui/run.js, which exits 77 (skipped) when /usr/bin/chromium
# or the latentd binary is missing, or when the server lacks the node types the test needs.
# Needs `npm ci` in web/ (litegraph) and in tests/ (playwright-core, ws); tools/install.sh does both.
# Screenshots and server logs land in <build>/ui-artifacts/.
find_program(LATENTD_NODE_EXE node)
if(LATENTD_NODE_EXE)
  set(ui_dir ${CMAKE_CURRENT_LIST_DIR})
  foreach(t page_load queue_image sampler_preview broken_graph interrupt png_drop upload undo_shortcuts search workflows queue_history)
    add_test(NAME ui_${t} COMMAND ${LATENTD_NODE_EXE} ${ui_dir}/run.js ${ui_dir}/${t}.test.js
             WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
    set_tests_properties(ui_${t} PROPERTIES LABELS ui SKIP_RETURN_CODE 77 TIMEOUT 180 RUN_SERIAL ON
      ENVIRONMENT "LATENTD_BIN=${PROJECT_BINARY_DIR}/latentd;LATENTD_GEN_CKPT=${PROJECT_BINARY_DIR}/gen_ckpt;LATENTD_UI_ARTIFACTS=${PROJECT_BINARY_DIR}/ui-artifacts")
  endforeach()
  # The page's PNG metadata reader under Node: needs neither Chromium nor latentd.
  add_test(NAME ui_png_reader COMMAND ${LATENTD_NODE_EXE} --test ${ui_dir}/png_reader.test.js)
  set_tests_properties(ui_png_reader PROPERTIES LABELS ui TIMEOUT 60)
endif()
