# bench/ops: tensor op throughput on SD1.5 shapes vs sgemm in the same run.
# One command: bench/ops/run.sh <build dir>  (or the target bench_ops_run).
add_executable(bench_ops ${CMAKE_CURRENT_LIST_DIR}/ops/bench_ops.c ${CMAKE_CURRENT_LIST_DIR}/ops/bench_ops_linear.c
               ${CMAKE_CURRENT_LIST_DIR}/ops/bench_ops_conv.c
               ${CMAKE_CURRENT_LIST_DIR}/ops/bench_ops_bf16.c)
target_include_directories(bench_ops PRIVATE ${CMAKE_CURRENT_LIST_DIR}/common)
target_link_libraries(bench_ops PRIVATE latentd_tensor latentd_bench_peaks)
add_custom_target(bench_ops_run
                  COMMAND ${CMAKE_CURRENT_LIST_DIR}/ops/run.sh $<TARGET_FILE:bench_ops>
                  DEPENDS bench_ops USES_TERMINAL)
