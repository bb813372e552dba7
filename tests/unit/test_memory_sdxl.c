/*
 * test_memory_sdxl — the SDXL UNet (3 levels, transformer depth 0/2/10, ADM input)
 * streamed by the memory manager, the twin of test_memory_sd15: a tiny generated
 * checkpoint evaluated (batch 2, an odd 13x11 latent, 154 tokens, one y per sample) on
 * "sim:SIZE" devices whose budgets hold 100/50/25 % of the UNet's weight bytes plus its
 * activation plan (memory_unet.h: outputs bit-identical to the cpu device and to full
 * residency, peak within budget, bytes streamed, nothing left after the unload).
 */
#include "memory_unet.h"

int main(void)
{
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    struct mem_unet m = {.b = 2, .h = 13, .w = 11, .t = 154, .ts = {999.0f, 321.0f}};
    struct model_config cfg;
    sdxl_config_tiny(&cfg);
    if (mem_unet_init(&m, &cfg, "test_memory_sdxl") == 0) {
        static const int pct[] = {100, 50, 25};
        mem_unet_check_budgets(&m, pct, 3);
    }
    mem_unet_release(&m);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
