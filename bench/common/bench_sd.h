/*
 * bench_sd — the cases bench/sd15 and bench/sdxl share: a full-size checkpoint's text
 * encoder, UNet (batch 2, as with CFG) and VAE decode timed on the CPU, each printed with
 * its GFLOP/s as a fraction of an fp32 sgemm (1024^3 through tensor_linear) measured right
 * before and after that case in the same run (the machine is shared, so the peak is
 * remeasured rather than assumed), and the process's peak RSS.
 *
 * A family differs only in data: which text encoders, whether the UNet takes an ADM
 * vector (SDXL's y, filled with a deterministic pattern here: the cost does not depend
 * on its values). Main thread only.
 */
#ifndef LATENTD_BENCH_SD_H
#define LATENTD_BENCH_SD_H

#include "checkpoint.h"
#include "memmgr.h"
#include "text_encoder.h"

/* A new f32 tensor on d filled with sin(a * i + 0.3): deterministic inputs whose cost
 * does not depend on their values. */
struct tensor *bench_sd_filled(struct dev *d, int ndim, const int64_t *shape, double a);

/* fp32 sgemm GFLOP/s on d (best of 3, after a warm-up). */
double bench_sd_sgemm_rate(struct dev *d);

/* One line: name, seconds, GFLOP/s and its fraction of the mean of sg0 and sg1. */
void bench_sd_report(const char *name, double secs, double flops, double sg0, double sg1);

/* The process's peak resident set (VmHWM) in MiB, or -1 when unknown. */
double bench_sd_peak_rss_mib(void);

/*
 * Text encoder `comp` of ck (MODEL_CLIP or MODEL_CLIP2) on one 77-token chunk, best of 3
 * after a warm-up, printed as `name`; loads and unloads it on mm. opts as the family
 * encodes (SD1.5: normalised last layer; SDXL bigG: pad with zeros). Returns the
 * seconds, or -1.
 */
double bench_sd_text(struct mm *mm, struct model_ckpt *ck, enum model_component comp,
                     const struct text_encode_opts *opts, const char *name);

/* UNet, batch 2, 77 tokens, a lat x lat latent, best of `reps` runs (no separate warm-up:
 * full-size evals take seconds); with the ADM vector when the UNet has one. Returns the
 * seconds, or -1. */
double bench_sd_unet(struct mm *mm, struct model_ckpt *ck, int lat, int reps, const char *name);

/* VAE decode of one lat x lat latent, best of `reps`. Returns the seconds, or -1. */
double bench_sd_vae(struct mm *mm, struct model_ckpt *ck, int lat, int reps, const char *name);

#endif
