# bench/gligen: what GLIGEN adds to a UNet step (issue 16): the full-size random SD1.5 UNet,
# batch 2 at 256^2, with and without a full-size GLIGEN model (generated next to the
# checkpoint on first use: its position net on 4 boxes, a fuser per transformer),
# interleaved rounds, medians, the ratio and GLIGEN's weight share. One command:
# cmake --build <build> --target bench_gligen_run
#   (or <build>/bench_gligen [--ckpt PATH] [--gligen PATH] [--size N] [--rounds N]).
add_executable(bench_gligen ${CMAKE_CURRENT_LIST_DIR}/gligen/bench_gligen.c)
target_link_libraries(bench_gligen PRIVATE latentd_bench_sd latentd_ckptgen latentd_models)
set_target_properties(bench_gligen PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
add_custom_target(bench_gligen_run COMMAND $<TARGET_FILE:bench_gligen> --threads 2
                  WORKING_DIRECTORY ${PROJECT_BINARY_DIR} DEPENDS bench_gligen USES_TERMINAL)
