/*
 * bench_streaming_layers — bench_streaming --layers: the UNet layer sizes the planner
 * streams by, for the canonical SD1.5 and SDXL configs (from the key layout alone: no
 * checkpoint, nothing allocated), and whether a prefetch ring of depth 1 and 2 (2 and 3
 * slots of the largest layer) fits in 25 % of the UNet's f32 bytes. Issue 13's finding:
 * with a depth-10 SDXL transformer as one 1338 MiB layer neither fit, so the planner
 * streamed through one slot with no overlap.
 */
#include "bench_streaming_sd15.h"

#include <stdio.h>
#include <string.h>

#include "family.h"
#include "model_config.h"

struct layer_acc {
    char last[48], big_name[48];
    double cur, big, total; /* bytes at f32, 256-byte aligned as the patcher packs them */
    int n;
};

static void close_layer(struct layer_acc *a)
{
    if (a->n && a->cur > a->big) {
        a->big = a->cur;
        memcpy(a->big_name, a->last, sizeof(a->big_name));
    }
}

static void on_key(void *user, const struct model_key *k)
{
    struct layer_acc *a = user;
    if (k->comp != MODEL_UNET)
        return;
    double b = 4;
    for (int i = 0; i < k->ndim; i++)
        b *= (double)k->shape[i];
    b = (double)(((long long)b + 255) / 256 * 256);
    if (a->n == 0 || strcmp(a->last, k->layer) != 0) {
        close_layer(a);
        snprintf(a->last, sizeof(a->last), "%s", k->layer);
        a->cur = 0;
        a->n++;
    }
    a->cur += b;
    a->total += b;
}

static void one(const char *fam, const struct model_config *c)
{
    struct layer_acc a;
    memset(&a, 0, sizeof(a));
    model_layout_build(c, on_key, &a);
    close_layer(&a);
    double mib = 1048576.0, q = a.total / 4;
    printf("%-6s %3d layers %8.0f MiB  largest '%s' %7.1f MiB  25%% = %6.0f MiB: ring k=1 "
           "%6.0f MiB %-3s k=2 %6.0f MiB %s\n",
           fam, a.n, a.total / mib, a.big_name, a.big / mib, q / mib, 2 * a.big / mib,
           2 * a.big <= q ? "fits" : "no", 3 * a.big / mib, 3 * a.big <= q ? "fits" : "no");
}

int bench_streaming_layers(void)
{
    struct model_config c;
    sd15_config_canonical(&c);
    one("SD1.5", &c);
    sdxl_config_canonical(&c);
    one("SDXL", &c);
    return 0;
}
