# bench/txt2img: the default txt2img workflow through the SD1.5 nodes at 256^2 and 512^2,
# 4 euler steps, on the full-size random checkpoint (shared with bench_sd15): per-step time,
# VAE time, total, peak RSS, overhead over raw UNet evals and the ratio to
# stable-diffusion.cpp's figures. One command: cmake --build <build> --target bench_txt2img_run
#   (or <build>/bench_txt2img [--quick] [--tiny] [--ckpt PATH] [--threads N]).
# Cold runs against stable-diffusion.cpp in the same run (issue 15; bench/txt2img/cold_table.c):
# fresh processes exec -> PNG, latentd fp32 / bf16 / sd.cpp interleaved, medians, ratios and goals:
#   <build>/bench_txt2img --cold-only --threads 2 --reps 3 --sdcpp /tmp/sdcpp/build/bin/sd-cli
#   (or LATENTD_SDCPP=<sd-cli>; sd.cpp's default CPU build; ~30 min: its 512^2 run is ~330 s)
# fp32 vs bf16 per CPU-second, in one process, interleaved (UNet step, VAE decode):
#   <build>/bench_txt2img --ab [--size 256|512] [--reps N]   (bench/txt2img/ab_bf16.c)
add_executable(bench_txt2img ${CMAKE_CURRENT_LIST_DIR}/txt2img/bench_txt2img.c
               ${CMAKE_CURRENT_LIST_DIR}/txt2img/ab_bf16.c
               ${CMAKE_CURRENT_LIST_DIR}/txt2img/cold_table.c)
target_link_libraries(bench_txt2img PRIVATE latentd_nodes latentd_ckptgen latentd_bench_sd
                      latentd_bench_peaks)
set_target_properties(bench_txt2img PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
add_custom_target(bench_txt2img_run COMMAND $<TARGET_FILE:bench_txt2img> --threads 2
                  WORKING_DIRECTORY ${PROJECT_BINARY_DIR} DEPENDS bench_txt2img USES_TERMINAL)
# Profiling aid: LD_PRELOAD=<build>/libgemm_trace.so <program> prints time and GFLOP/s
# per oneDNN sgemm shape at exit (bench/txt2img/gemm_trace.c). Only with oneDNN.
find_library(LATENTD_GEMM_TRACE_DNNL dnnl)
if(LATENTD_GEMM_TRACE_DNNL)
  add_library(gemm_trace SHARED ${CMAKE_CURRENT_LIST_DIR}/txt2img/gemm_trace.c)
  target_link_libraries(gemm_trace PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
  set_target_properties(gemm_trace PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
endif()
