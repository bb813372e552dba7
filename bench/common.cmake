# bench/common: the SD-family benchmark cases (text encoders, UNet, VAE decode against an
# in-run sgemm, peak RSS) that bench/sd15 and bench/sdxl share.
add_library(latentd_bench_sd STATIC ${CMAKE_CURRENT_LIST_DIR}/common/bench_sd.c)
target_include_directories(latentd_bench_sd PUBLIC ${CMAKE_CURRENT_LIST_DIR}/common)
target_link_libraries(latentd_bench_sd PUBLIC latentd_models)
