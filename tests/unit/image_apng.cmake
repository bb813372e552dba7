# SaveAnimatedPNG (nodes/image/node_apng.c, nodes_image_apng.c): an APNG Pillow wrote decoded by
# the test's reader, ours decoded the same way and laid out as Pillow's, Pillow's frame merging,
# single-frame and duration rules, and the node writing into an output folder.
latentd_add_test(test_image_apng SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_image_apng.c
                 LIBS latentd_nodes z LABELS unit TIMEOUT 30
                 ARGS ${PROJECT_SOURCE_DIR}/tests/fixtures/image_nodes)
