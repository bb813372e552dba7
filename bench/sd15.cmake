# bench/sd15: SD1.5 CLIP / UNet (batch 2) / VAE decode throughput at 256^2 and 512^2 on the
# full-size random checkpoint (generated on first use), as a fraction of the in-run sgemm.
# One command: cmake --build <build> --target bench_sd15_run
#   (or <build>/bench_sd15 [--quick] [--ckpt PATH]; the checkpoint goes to $LATENTD_BENCH_DIR
#    or the current directory).
# The cases are bench/common/bench_sd.c's (latentd_bench_sd, bench/common.cmake).
add_executable(bench_sd15 ${CMAKE_CURRENT_LIST_DIR}/sd15/bench_sd15.c)
target_link_libraries(bench_sd15 PRIVATE latentd_bench_sd latentd_ckptgen latentd_models)
set_target_properties(bench_sd15 PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
add_custom_target(bench_sd15_run COMMAND $<TARGET_FILE:bench_sd15> --threads 2
                  WORKING_DIRECTORY ${PROJECT_BINARY_DIR} DEPENDS bench_sd15 USES_TERMINAL)
