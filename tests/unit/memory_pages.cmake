# The weight pages a process keeps mapped (issue 15, peak RSS): util/pages on a file
# mapping; a tiny f16 checkpoint's CLIP / UNet pages unmapped once a node loads another
# model alone (cpu device), kept with keep_weight_pages, unmapped after an upload (sim
# device); heap (converted) weights never dropped; outputs bit-identical throughout.
latentd_add_test(test_memory_pages
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_memory_pages.c
                 LIBS latentd_ckptgen latentd_models
                 ARGS ${PROJECT_SOURCE_DIR}/models/data/sd1_tokenizer
                 LABELS unit TIMEOUT 120)
