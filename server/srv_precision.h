/*
 * srv_precision — ComfyUI's dtype flags (comfy/cli_args.py) turned into the GEMM
 * precision of each kind of model (memory/memmgr.h mm_config.precision).
 *
 * ComfyUI's rules, kept: the flags come in argparse mutually exclusive groups
 * (--force-fp32/--force-fp16; the --*-unet flags; the --*-vae flags; the --*-text-enc
 * flags): two different flags of one group are an error ("argument --bf16-unet: not
 * allowed with argument --fp32-unet"), the same flag twice is not. A model's own flag
 * decides its dtype whatever --force-fp32 says (model_management.unet_dtype, vae_dtype
 * and text_encoder_dtype read it before FORCE_FP32 is consulted), so --force-fp32
 * --bf16-unet runs the UNet in bf16 and everything else in fp32. latentd's CPU default
 * is fp32 anyway: --force-fp32 and --fp32-* only say so. fp16, fp64 and fp8 have no CPU
 * path here: those flags are accepted with a notice and the model runs fp32.
 *
 * Threads: main thread, while the command line is parsed.
 */
#ifndef LATENTD_SERVER_SRV_PRECISION_H
#define LATENTD_SERVER_SRV_PRECISION_H

#include "err.h"
#include "tensor_precision.h"

#define SRV_PRECISION_GROUPS 4

struct srv_precision {
    const char *seen[SRV_PRECISION_GROUPS]; /* borrowed (static names): each group's flag */
};

/* 1 when `name` is one of the dtype flags. */
int srv_precision_is_flag(const char *name);
/* Record one dtype flag; ERR_INVALID with argparse's message on a group conflict. */
int srv_precision_add(struct srv_precision *st, const char *name, struct err *e);
/* The precision per enum patcher_role (index) the recorded flags ask for. */
void srv_precision_resolve(const struct srv_precision *st, enum tensor_precision out[4]);

#endif
