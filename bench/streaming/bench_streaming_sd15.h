/*
 * bench_streaming_sd15 — bench_streaming's SD1.5 UNet mode (--sd15 CKPT [--size N]
 * [--steps N]): batch-2 UNet eval time on the sim device at 100/50/25/5 % budgets as
 * ratios to full residency measured in the same run, and bytes copied per eval.
 * Prints the table; returns the process exit code. Main thread only.
 */
#ifndef LATENTD_BENCH_STREAMING_SD15_H
#define LATENTD_BENCH_STREAMING_SD15_H

int bench_streaming_sd15(const char *ckpt, int size, int rounds);

/* The same for a checkpoint of any family (an SDXL UNet gets a deterministic ADM
 * vector) at budgets pct[0..nb) (pct[0] must be 100, nb <= 4); when ratio_out is not
 * NULL it receives each budget's median time ratio to pct[0]. */
int bench_streaming_unet(const char *ckpt, int size, int rounds, const int *pct, int nb,
                         double *ratio_out);

/* bench_streaming --layers (bench_streaming_layers.c): the canonical SD1.5 and SDXL
 * UNets' streaming layers and whether a prefetch ring fits a 25 % budget. */
int bench_streaming_layers(void);

#endif
