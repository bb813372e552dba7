# The codec module's in-memory entry points (nodes/image/node_imageio.h): PNG with text
# chunks and JPEG round trips, truncated/garbage bytes refused.
latentd_add_test(test_image_codec SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_image_codec.c
                 LIBS latentd_nodes m LABELS unit TIMEOUT 30)
