# Weights kept at their file dtype (issue 15): f16/bf16 tiny checkpoints loaded as kept
# (borrowed, widened in the ops) and converted at load give bit-identical CLIP, UNet
# (plain, LoRA, sim device resident and streamed) and VAE outputs; kept host copies are
# half the bytes and all borrowed.
latentd_add_test(test_models_filedtype
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_models_filedtype.c
                 LIBS latentd_ckptgen latentd_models
                 ARGS ${PROJECT_SOURCE_DIR}/models/data/sd1_tokenizer
                 LABELS unit TIMEOUT 120)
