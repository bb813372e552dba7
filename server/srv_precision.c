/*
 * srv_precision.c — ComfyUI's dtype flags -> per-model GEMM precision (srv_precision.h).
 */
#include "srv_precision.h"

#include <string.h>

#include "log.h"
#include "patcher.h"

enum { G_FORCE, G_UNET, G_VAE, G_TEXT };

struct dtype_flag {
    const char *name;
    int group;
    int role;                /* enum patcher_role it sets, -1: none (--force-*) */
    enum tensor_precision p; /* what latentd runs for it */
    int real;                /* 0: a dtype latentd has no CPU path for (notice, fp32) */
};

static const struct dtype_flag dtype_flags[] = {
    {"--force-fp32", G_FORCE, -1, TENSOR_PRECISION_F32, 1},
    {"--force-fp16", G_FORCE, -1, TENSOR_PRECISION_F32, 0},
    {"--fp32-unet", G_UNET, PATCHER_ROLE_UNET, TENSOR_PRECISION_F32, 1},
    {"--fp64-unet", G_UNET, PATCHER_ROLE_UNET, TENSOR_PRECISION_F32, 0},
    {"--bf16-unet", G_UNET, PATCHER_ROLE_UNET, TENSOR_PRECISION_BF16, 1},
    {"--fp16-unet", G_UNET, PATCHER_ROLE_UNET, TENSOR_PRECISION_F32, 0},
    {"--fp8_e4m3fn-unet", G_UNET, PATCHER_ROLE_UNET, TENSOR_PRECISION_F32, 0},
    {"--fp8_e5m2-unet", G_UNET, PATCHER_ROLE_UNET, TENSOR_PRECISION_F32, 0},
    {"--fp8_e8m0fnu-unet", G_UNET, PATCHER_ROLE_UNET, TENSOR_PRECISION_F32, 0},
    {"--fp16-vae", G_VAE, PATCHER_ROLE_VAE, TENSOR_PRECISION_F32, 0},
    {"--fp32-vae", G_VAE, PATCHER_ROLE_VAE, TENSOR_PRECISION_F32, 1},
    {"--bf16-vae", G_VAE, PATCHER_ROLE_VAE, TENSOR_PRECISION_BF16, 1},
    {"--fp8_e4m3fn-text-enc", G_TEXT, PATCHER_ROLE_TEXT_ENCODER, TENSOR_PRECISION_F32, 0},
    {"--fp8_e5m2-text-enc", G_TEXT, PATCHER_ROLE_TEXT_ENCODER, TENSOR_PRECISION_F32, 0},
    {"--fp16-text-enc", G_TEXT, PATCHER_ROLE_TEXT_ENCODER, TENSOR_PRECISION_F32, 0},
    {"--fp32-text-enc", G_TEXT, PATCHER_ROLE_TEXT_ENCODER, TENSOR_PRECISION_F32, 1},
    {"--bf16-text-enc", G_TEXT, PATCHER_ROLE_TEXT_ENCODER, TENSOR_PRECISION_BF16, 1},
};

#define N_FLAGS (sizeof(dtype_flags) / sizeof(dtype_flags[0]))

static const struct dtype_flag *find(const char *name)
{
    for (size_t i = 0; i < N_FLAGS; i++)
        if (strcmp(dtype_flags[i].name, name) == 0)
            return &dtype_flags[i];
    return NULL;
}

int srv_precision_is_flag(const char *name) { return find(name) != NULL; }

int srv_precision_add(struct srv_precision *st, const char *name, struct err *e)
{
    const struct dtype_flag *f = find(name);
    if (!f)
        return err_set(e, ERR_INVALID, "unknown dtype flag '%s'", name);
    const char *prev = st->seen[f->group];
    if (prev && strcmp(prev, f->name) != 0)
        return err_set(e, ERR_INVALID, "argument %s: not allowed with argument %s", f->name,
                       prev);
    st->seen[f->group] = f->name;
    if (!f->real)
        log_info("notice: '%s' accepted for ComfyUI compatibility; latentd has no such CPU "
                 "path, the model computes in fp32",
                 f->name);
    return 0;
}

void srv_precision_resolve(const struct srv_precision *st, enum tensor_precision out[4])
{
    for (int r = 0; r < 4; r++)
        out[r] = TENSOR_PRECISION_F32; /* latentd's default, and --force-fp32's */
    for (int g = G_UNET; g <= G_TEXT; g++) {
        const struct dtype_flag *f = st->seen[g] ? find(st->seen[g]) : NULL;
        if (f)
            out[f->role] = f->p; /* the model's own flag wins over --force-fp32 */
    }
}
