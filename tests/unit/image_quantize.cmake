# ImageQuantize (nodes/image/node_quant.c, nodes_image_quantize.c): Pillow's median cut,
# palette mapping and Floyd-Steinberg and ComfyUI's Bayer dither against fixtures written
# by Pillow (tools/image_quantize_reference.py -> tests/fixtures/image_nodes), and the node.
latentd_add_test(test_image_quantize SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_image_quantize.c
                 LIBS latentd_nodes LABELS unit TIMEOUT 60
                 ARGS ${PROJECT_SOURCE_DIR}/tests/fixtures/image_nodes)
