# PyTorch checkpoints (.ckpt/.pt) read by the restricted unpickler (models/pt_*.c).
# The committed fixtures in tests/fixtures/ckpt are written by tools/pt_fixtures.py.
latentd_add_test(test_models_pt SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_models_pt.c
                 LIBS latentd_models ARGS ${PROJECT_SOURCE_DIR}/tests/fixtures/ckpt
                 LABELS unit TIMEOUT 60)

# The tiny SD1.5 checkpoint as torch.save would write it (plain, lightning-nested,
# Parameters, ZIP64; f32 and f16) against the safetensors file it was converted from.
# Needs python3 (standard library only) to convert; not registered without it.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND TARGET gen_ckpt)
  set(pt_dir ${PROJECT_BINARY_DIR}/test_models_pt_tiny)
  # One string, not a list: it is spliced into the sh -c command below.
  set(pt_conv "${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/pt_write.py convert")
  add_test(NAME test_models_pt_tiny_setup COMMAND sh -c
    "mkdir -p ${pt_dir} && cd ${pt_dir} && \
     $<TARGET_FILE:gen_ckpt> --tiny tiny.safetensors && \
     $<TARGET_FILE:gen_ckpt> --tiny --dtype f16 --extras tiny16.safetensors && \
     ${pt_conv} tiny.safetensors tiny.ckpt && \
     ${pt_conv} tiny.safetensors tiny_nested.ckpt --nested --zip64 && \
     ${pt_conv} tiny16.safetensors tiny16.ckpt --param --nested")
  set_tests_properties(test_models_pt_tiny_setup PROPERTIES LABELS unit TIMEOUT 120
                       FIXTURES_SETUP pt_tiny)
  add_test(NAME test_models_pt_tiny COMMAND test_models_pt ${PROJECT_SOURCE_DIR}/tests/fixtures/ckpt
           ${pt_dir}/tiny.safetensors ${pt_dir}/tiny.ckpt
           ${pt_dir}/tiny.safetensors ${pt_dir}/tiny_nested.ckpt
           ${pt_dir}/tiny16.safetensors ${pt_dir}/tiny16.ckpt)
  set_tests_properties(test_models_pt_tiny PROPERTIES LABELS unit TIMEOUT 60
                       FIXTURES_REQUIRED pt_tiny)
endif()
