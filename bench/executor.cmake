# bench/executor: the executor's own overhead in microseconds per node for a 10k-node
# chain and a 10k-node wide DAG of trivial nodes (goal <= 2 us/node), fresh and fully
# cached, with and without event building, and the time to validate the default
# workflow (with stand-in SD node declarations registered by the benchmark only).
# One command: build/bench/bench_executor (or the target bench_executor_run).
# Instruction counts of the chain's all-cached runs alone (for A/B on a loaded machine):
#   valgrind --tool=callgrind --collect-atstart=no build/bench/bench_executor --count-cached [native]
# and likewise of its validations (--count-validate) or of its prompts on the server's path,
# validate + run of the native prompt + free (--count-server fresh|cached). Without valgrind
# these print thread CPU time and minor page faults (first run, later runs): in this VM a
# fault costs tens of microseconds, so memory a prompt gives back and the next one faults in
# again shows up there and not in instruction counts.
add_executable(bench_executor ${CMAKE_CURRENT_LIST_DIR}/executor/bench_executor.c)
target_link_libraries(bench_executor PRIVATE latentd_graph)
target_compile_definitions(bench_executor PRIVATE LATENTD_FIXTURES_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures")
add_custom_target(bench_executor_run COMMAND $<TARGET_FILE:bench_executor>
                  DEPENDS bench_executor USES_TERMINAL)
