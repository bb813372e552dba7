# bench/controlnet: what one ControlNet adds to a UNet step (issue 16): the full-size random
# SD1.5 UNet, batch 2 at 512^2, with and without a full-size ControlNet (generated next to
# the checkpoint on first use), interleaved rounds, medians, the ratio and the ControlNet's
# weight share. One command: cmake --build <build> --target bench_controlnet_run
#   (or <build>/bench_controlnet [--ckpt PATH] [--cn PATH] [--size N] [--rounds N]).
add_executable(bench_controlnet ${CMAKE_CURRENT_LIST_DIR}/controlnet/bench_controlnet.c)
target_link_libraries(bench_controlnet PRIVATE latentd_bench_sd latentd_ckptgen latentd_models)
set_target_properties(bench_controlnet PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
add_custom_target(bench_controlnet_run COMMAND $<TARGET_FILE:bench_controlnet> --threads 2
                  WORKING_DIRECTORY ${PROJECT_BINARY_DIR} DEPENDS bench_controlnet USES_TERMINAL)
