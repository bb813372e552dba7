# bench/sdxl: SDXL base CLIP-L / bigG / UNet (batch 2) at 512^2 (1024^2 and the VAE decode
# at 1024^2 behind LATENTD_BENCH_1024 / LATENTD_BENCH_VAE1024) on the full-size random
# checkpoint (generated on first use), as a fraction of the in-run sgemm, peak RSS, and the
# streaming ratio at a 25 % sim budget. bench/sd15's twin (bench/common/bench_sd.c).
# One command: cmake --build <build> --target bench_sdxl_run
#   (or <build>/bench_sdxl [--ckpt PATH] [--threads N] [--no-stream]; the checkpoint goes to
#    $LATENTD_BENCH_DIR or the current directory).
add_executable(bench_sdxl ${CMAKE_CURRENT_LIST_DIR}/sdxl/bench_sdxl.c
               ${CMAKE_CURRENT_LIST_DIR}/streaming/bench_streaming_sd15.c)
target_include_directories(bench_sdxl PRIVATE ${CMAKE_CURRENT_LIST_DIR}/streaming)
target_link_libraries(bench_sdxl PRIVATE latentd_bench_sd latentd_ckptgen latentd_memory
                      latentd_models)
set_target_properties(bench_sdxl PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
add_custom_target(bench_sdxl_run COMMAND $<TARGET_FILE:bench_sdxl> --threads 2
                  WORKING_DIRECTORY ${PROJECT_BINARY_DIR} DEPENDS bench_sdxl USES_TERMINAL)
