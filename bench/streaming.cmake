# bench/streaming: synthetic-model step time at device budgets of 100/50/25/5 % of the
# model, as ratios to full residency measured in the same run, and bytes copied per step.
# One command: build/bench/bench_streaming [sim:SIZE|cuda:N] (or the target bench_streaming_run).
# SD1.5 UNet mode: bench_streaming --sd15 CKPT [--size 256] [--steps N] (bench_streaming_sd15.c).
# bench_streaming --layers: the SD1.5/SDXL UNets' streaming layer sizes against a 25 % budget.
add_executable(bench_streaming ${CMAKE_CURRENT_LIST_DIR}/streaming/bench_streaming.c
               ${CMAKE_CURRENT_LIST_DIR}/streaming/bench_streaming_sd15.c
               ${CMAKE_CURRENT_LIST_DIR}/streaming/bench_streaming_layers.c)
target_include_directories(bench_streaming PRIVATE ${PROJECT_SOURCE_DIR}/tests/unit
                           ${CMAKE_CURRENT_LIST_DIR}/common)
target_link_libraries(bench_streaming PRIVATE latentd_memory latentd_models)
add_custom_target(bench_streaming_run COMMAND $<TARGET_FILE:bench_streaming>
                  DEPENDS bench_streaming USES_TERMINAL)
