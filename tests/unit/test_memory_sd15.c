/*
 * test_memory_sd15 — the SD1.5 UNet streamed by the memory manager: a tiny generated
 * checkpoint evaluated (batch 2, 16x16 latent, 77 tokens) on "sim:SIZE" devices whose
 * budgets hold 100/50/25/5 % of the UNet's weight bytes plus its activation plan
 * (memory_unet.h: outputs bit-identical to the cpu device and to full residency, peak
 * within budget, bytes streamed, nothing left after the unload, clear refusals).
 */
#include "memory_unet.h"

int main(void)
{
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    struct mem_unet m = {.b = 2, .h = 16, .w = 16, .t = 77, .ts = {999.0f, 321.0f}};
    struct model_config cfg;
    sd15_config_tiny(&cfg);
    if (mem_unet_init(&m, &cfg, "test_memory_sd15") == 0) {
        static const int pct[] = {100, 50, 25, 5};
        mem_unet_check_budgets(&m, pct, 4);
    }
    mem_unet_release(&m);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
