# bench/common: the SD-family benchmark cases (text encoders, UNet, VAE decode against an
# in-run sgemm, peak RSS) that bench/sd15 and bench/sdxl share.
add_library(latentd_bench_sd STATIC ${CMAKE_CURRENT_LIST_DIR}/common/bench_sd.c)
target_include_directories(latentd_bench_sd PUBLIC ${CMAKE_CURRENT_LIST_DIR}/common)
target_link_libraries(latentd_bench_sd PUBLIC latentd_models)
# The CPU's peak arithmetic rates, measured where a benchmark reports fractions of them
# (bench_ops, bench_txt2img).
add_library(latentd_bench_peaks STATIC ${CMAKE_CURRENT_LIST_DIR}/common/bench_peaks.c)
target_include_directories(latentd_bench_peaks PUBLIC ${CMAKE_CURRENT_LIST_DIR}/common)
target_link_libraries(latentd_bench_peaks PUBLIC latentd_tensor Threads::Threads)
