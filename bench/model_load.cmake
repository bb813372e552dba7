# bench/model_load: load time, peak RSS and RSS after loading the full-size SD1.5 random
# checkpoint (generated on first use), as f32 (the f16 weights kept at their file dtype,
# borrowed from the mapping), as f32 converted at load (file closed; the policy before
# issue 15) and as f16. One command: cmake --build <build> --target bench_model_load_run
add_executable(bench_model_load ${CMAKE_CURRENT_LIST_DIR}/model_load/bench_model_load.c)
target_link_libraries(bench_model_load PRIVATE latentd_ckptgen latentd_models)
set_target_properties(bench_model_load PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
add_custom_target(bench_model_load_run
                  COMMAND $<TARGET_FILE:bench_model_load> --as f32
                  COMMAND $<TARGET_FILE:bench_model_load> --as f32-convert
                  COMMAND $<TARGET_FILE:bench_model_load> --as f16
                  WORKING_DIRECTORY ${PROJECT_BINARY_DIR} DEPENDS bench_model_load USES_TERMINAL)
