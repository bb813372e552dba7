# bench/upscale: a full-size 4x ESRGAN (nf 64, nb 23, random weights) on a 512^2 image,
# tiled as ImageUpscaleWithModel, 2 threads: seconds and GFLOP/s as a fraction of the fp32
# sgemm peak measured in the same run. One command: the target bench_upscale_run (or
# build/bench_upscale directly; the model is generated on first use, ~67 MB).
add_executable(bench_upscale ${CMAKE_CURRENT_LIST_DIR}/upscale/bench_upscale.c)
target_link_libraries(bench_upscale PRIVATE latentd_upsgen latentd_models)
add_custom_target(bench_upscale_run COMMAND $<TARGET_FILE:bench_upscale>
                  WORKING_DIRECTORY ${CMAKE_BINARY_DIR} DEPENDS bench_upscale USES_TERMINAL)
