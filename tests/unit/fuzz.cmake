# tests/fuzz/: libFuzzer drivers for the parsers that see untrusted bytes (STYLE.md "Tests").
#
# Every build (gcc included) links each driver with tests/fuzz/replay_main.c into
# fuzz_replay_<name>, a unit test that runs the driver over its committed seed corpus
# tests/fuzz/corpus/<name>/, so inputs that once crashed stay fixed.
#
# With clang and -DLATENTD_FUZZ=ON each driver is also a real libFuzzer binary
# fuzz_<name> (-fsanitize=fuzzer,address,undefined; UB aborts), and the layer libraries
# are built with coverage and the same sanitizers so the fuzzer sees inside them:
#   CC=clang cmake -S . -B build-fuzz -G Ninja -DLATENTD_FUZZ=ON -DLATENTD_CUDA=OFF
#   cmake --build build-fuzz --target fuzz_prompt
#   build-fuzz/fuzz_prompt -dict=tests/fuzz/prompt.dict -max_total_time=180 \
#       /tmp/work-corpus tests/fuzz/corpus/prompt
# (new inputs go to the first directory; merge back with -merge=1, see tests/fuzz/README.md).
option(LATENTD_FUZZ "Build libFuzzer drivers (clang only) and instrument the libraries" OFF)
if(LATENTD_FUZZ AND NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "LATENTD_FUZZ needs clang (libFuzzer); configure with CC=clang")
endif()

set(fuzz_dir ${PROJECT_SOURCE_DIR}/tests/fuzz)
set(fuzz_sanitizers -fsanitize=address,undefined -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer)

if(LATENTD_FUZZ)
  # Coverage and sanitizers inside the code under test, not only in the drivers.  Every
  # consumer of these libraries then links the sanitizer runtimes (INTERFACE).
  foreach(lib latentd_util latentd_device latentd_tensor latentd_memory latentd_models
              latentd_nodes latentd_graph)
    if(TARGET ${lib})
      get_target_property(lib_type ${lib} TYPE)
      if(NOT lib_type STREQUAL "INTERFACE_LIBRARY")
        target_compile_options(${lib} PRIVATE -fsanitize=fuzzer-no-link ${fuzz_sanitizers})
        target_link_options(${lib} INTERFACE -fsanitize=address,undefined)
      endif()
    endif()
  endforeach()
endif()

# latentd_add_fuzz(<name> SOURCES ... LIBS ... [INCLUDES ...])
function(latentd_add_fuzz name)
  cmake_parse_arguments(F "" "" "SOURCES;LIBS;INCLUDES" ${ARGN})
  latentd_add_test(fuzz_replay_${name}
    SOURCES ${fuzz_dir}/fuzz_${name}.c ${fuzz_dir}/replay_main.c ${F_SOURCES}
    LIBS ${F_LIBS} ARGS ${fuzz_dir}/corpus/${name} LABELS unit TIMEOUT 120)
  target_include_directories(fuzz_replay_${name} PRIVATE ${fuzz_dir} ${F_INCLUDES})
  if(LATENTD_FUZZ)
    add_executable(fuzz_${name} ${fuzz_dir}/fuzz_${name}.c ${F_SOURCES})
    target_include_directories(fuzz_${name} PRIVATE ${fuzz_dir} ${F_INCLUDES})
    target_compile_options(fuzz_${name} PRIVATE -fsanitize=fuzzer ${fuzz_sanitizers})
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(fuzz_${name} PRIVATE ${F_LIBS})
    set_target_properties(fuzz_${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
  endif()
endfunction()

latentd_add_fuzz(prompt LIBS latentd_graph)
latentd_add_fuzz(safetensors LIBS latentd_models)
latentd_add_fuzz(tokenizer LIBS latentd_models m)
latentd_add_fuzz(image_load LIBS latentd_nodes)
# server/ sources compiled in directly (as test_server_path does): the pure helpers
# need neither MHD nor the rest of latentd_server.
latentd_add_fuzz(srv_path SOURCES ${PROJECT_SOURCE_DIR}/server/srv_path.c
                 LIBS latentd_util INCLUDES ${PROJECT_SOURCE_DIR}/server)
# srv_image.c sits on the codec module (nodes/image/node_imageio.h).
latentd_add_fuzz(upload_image SOURCES ${PROJECT_SOURCE_DIR}/server/srv_image.c
                 LIBS latentd_nodes INCLUDES ${PROJECT_SOURCE_DIR}/server)
# LoRA files against a tiny generated checkpoint (tools/ckpt_gen.h).
latentd_add_fuzz(lora LIBS latentd_ckptgen latentd_models)
# PyTorch .ckpt/.pt files: the zip directory and the restricted unpickler (models/pt_*.h).
latentd_add_fuzz(ckpt LIBS latentd_models)
