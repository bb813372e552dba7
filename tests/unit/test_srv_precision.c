/*
 * test_srv_precision — ComfyUI's dtype flags parsed into per-model GEMM precision
 * (server/srv_precision.h): defaults, each --bf16-* flag, --force-fp32 not overriding
 * a model's own flag (model_management.unet_dtype reads args.bf16_unet first),
 * argparse's mutually exclusive groups (a conflict is an error with argparse's
 * message, the same flag twice is not), and the fp16/fp8 flags accepted as fp32.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "harness.h"
#include "srv_config.h"

#define F32 TENSOR_PRECISION_F32
#define BF16 TENSOR_PRECISION_BF16

/* Parse argv (NULL-terminated after argv[0]); rc and the three precisions. */
static int parse(enum tensor_precision *u, enum tensor_precision *v, enum tensor_precision *t,
                 char *msg, size_t cap, ...)
{
    char *argv[16] = {"latentd"};
    int argc = 1;
    va_list ap;
    va_start(ap, cap);
    for (char *a; argc < 15 && (a = va_arg(ap, char *));)
        argv[argc++] = a;
    va_end(ap);
    struct srv_config cfg;
    struct err e = {0};
    int rc = srv_config_parse(&cfg, argc, argv, "/tmp", &e);
    if (rc == SRV_CONFIG_RUN) {
        *u = cfg.mm.precision[PATCHER_ROLE_UNET];
        *v = cfg.mm.precision[PATCHER_ROLE_VAE];
        *t = cfg.mm.precision[PATCHER_ROLE_TEXT_ENCODER];
        srv_config_release(&cfg);
    }
    if (msg)
        snprintf(msg, cap, "%s", rc < 0 ? e.msg : "");
    return rc;
}

#define CASE(want_u, want_v, want_t, ...)                                                 \
    do {                                                                                  \
        enum tensor_precision u = 9, v = 9, t = 9;                                        \
        int rc = parse(&u, &v, &t, NULL, 0, __VA_ARGS__, (char *)NULL);                   \
        ok(rc == 0 && u == (want_u) && v == (want_v) && t == (want_t),                    \
           "%s -> unet %s, vae %s, text %s (rc %d, got %d %d %d)", #__VA_ARGS__,          \
           tensor_precision_name(want_u), tensor_precision_name(want_v),                  \
           tensor_precision_name(want_t), rc, (int)u, (int)v, (int)t);                    \
    } while (0)

#define CONFLICT(want_msg, ...)                                                           \
    do {                                                                                  \
        enum tensor_precision u, v, t;                                                    \
        char m[600];                                                                      \
        int rc = parse(&u, &v, &t, m, sizeof(m), __VA_ARGS__, (char *)NULL);              \
        ok(rc < 0 && strcmp(m, want_msg) == 0, "%s refused: '%s'", #__VA_ARGS__, m);      \
    } while (0)

int main(void)
{
    long live0 = alloc_live_count();
    CASE(F32, F32, F32, "--port", "0");
    CASE(BF16, F32, F32, "--bf16-unet");
    CASE(F32, BF16, F32, "--bf16-vae");
    CASE(F32, F32, BF16, "--bf16-text-enc");
    CASE(BF16, BF16, BF16, "--bf16-text-enc", "--bf16-vae", "--bf16-unet");
    /* a model's own flag wins over --force-fp32, in either order */
    CASE(BF16, F32, F32, "--force-fp32", "--bf16-unet");
    CASE(BF16, BF16, F32, "--bf16-unet", "--bf16-vae", "--force-fp32");
    CASE(F32, F32, F32, "--force-fp32");
    CASE(F32, BF16, F32, "--fp32-unet", "--bf16-vae", "--fp32-text-enc");
    /* the same flag twice is fine (argparse store_true) */
    CASE(BF16, F32, F32, "--bf16-unet", "--bf16-unet");
    /* no CPU path for fp16/fp8: accepted, fp32; --force-fp16 does not override bf16 */
    CASE(F32, F32, F32, "--fp16-unet", "--fp16-vae", "--fp8_e4m3fn-text-enc");
    CASE(BF16, F32, F32, "--force-fp16", "--bf16-unet");
    /* argparse's mutually exclusive groups */
    CONFLICT("argument --fp32-unet: not allowed with argument --bf16-unet", "--bf16-unet",
             "--fp32-unet");
    CONFLICT("argument --bf16-vae: not allowed with argument --fp32-vae", "--fp32-vae",
             "--bf16-vae");
    CONFLICT("argument --bf16-text-enc: not allowed with argument --fp16-text-enc",
             "--fp16-text-enc", "--bf16-text-enc");
    CONFLICT("argument --force-fp16: not allowed with argument --force-fp32", "--force-fp32",
             "--force-fp16");
    CONFLICT("argument --fp16-unet: not allowed with argument --bf16-unet", "--bf16-unet",
             "--fp16-unet");
    CONFLICT("flag '--bf16-unet' takes no value", "--bf16-unet=1");
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
