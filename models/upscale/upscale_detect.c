/*
 * Which upscale model a file holds (see upscale.h): kind and naming from marker keys,
 * widths and counts from shapes, then a strict check of the whole tensor list.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "upscale.h"

static const struct st_tensor *findf(const struct st_file *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static const struct st_tensor *findf(const struct st_file *f, const char *fmt, ...)
{
    char k[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k, sizeof(k), fmt, ap);
    va_end(ap);
    return st_find(f, k);
}

/* Largest N with "<prefix>N.weight" a tensor name (N directly followed by ".weight"). */
static int max_index(const struct st_file *f, const char *prefix)
{
    size_t pl = strlen(prefix);
    int best = -1;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const char *n = f->tensors[i].name;
        int v, used = 0;
        if (strncmp(n, prefix, pl) || sscanf(n + pl, "%d%n", &v, &used) != 1 || used < 1)
            continue;
        if (!strcmp(n + pl + used, ".weight") && v > best)
            best = v;
    }
    return best;
}

static int any_key_has(const struct st_file *f, const char *needle)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        if (strstr(f->tensors[i].name, needle))
            return 1;
    return 0;
}

/* A hint at what the file is when it is no upscale model we know. */
static const char *what_else(const struct st_file *f)
{
    if (any_key_has(f, "model.diffusion_model."))
        return " (it holds a Stable Diffusion checkpoint: put it in models/checkpoints)";
    if (any_key_has(f, "lora_"))
        return " (it holds a LoRA: put it in models/loras)";
    if (any_key_has(f, "decoder.conv_in") || any_key_has(f, "first_stage_model."))
        return " (it holds a VAE: put it in models/vae)";
    if (any_key_has(f, "layers.0.residual_group") || any_key_has(f, "attn_mask"))
        return " (a transformer upscaler such as SwinIR/HAT/DAT, which latentd does not run)";
    return "";
}

static int detect_esrgan(const struct st_file *f, const char *what, struct ups_arch *a,
                         struct err *e)
{
    const struct st_tensor *first, *rdb, *last;
    int old = a->naming == UPS_NAMING_OLD;
    if (any_key_has(f, "conv1x1"))
        return err_set(e, ERR_UNSUPPORTED,
                       "unsupported upscale model '%s': ESRGAN+ (\"plus\", conv1x1 shortcuts) is "
                       "not supported",
                       what);
    first = findf(f, old ? "model.0.weight" : "conv_first.weight");
    while (findf(f, old ? "model.1.sub.%d.RDB1.conv1.0.weight" : "body.%d.rdb1.conv1.weight",
                 a->nb))
        a->nb++;
    if (old) {
        int m = max_index(f, "model.");
        if (m < 4 || (m - 4) % 3)
            return err_set(e, ERR_UNSUPPORTED,
                           "unsupported upscale model '%s': ESRGAN layout with last conv "
                           "'model.%d' (3x pixel-shuffle ESRGANs are not supported)",
                           what, m);
        a->n_up = (m - 4) / 3;
        last = findf(f, "model.%d.weight", m);
    } else {
        while (findf(f, "conv_up%d.weight", a->n_up + 1))
            a->n_up++;
        last = findf(f, "conv_last.weight");
    }
    rdb = findf(f, old ? "model.1.sub.0.RDB1.conv1.0.weight" : "body.0.rdb1.conv1.weight");
    if (!first || !rdb || !last || first->ndim != 4 || rdb->ndim != 4 || last->ndim != 4 ||
        a->nb < 1)
        return err_set(e, ERR_INVALID, "'%s': incomplete ESRGAN model (conv_first, body or "
                       "conv_last missing or not 4-D)", what);
    a->nf = (int)first->shape[0];
    a->gc = (int)rdb->shape[0];
    a->out_ch = (int)last->shape[0];
    int cin = (int)first->shape[1];
    /* Real-ESRGAN x2plus / x1: the input is pixel-unshuffled by 2 / 4 (spandrel's rule:
     * in channels 4 or 16 times the out channels). */
    a->shuffle = cin == 4 * a->out_ch ? 2 : cin == 16 * a->out_ch ? 4 : 1;
    a->in_ch = cin / (a->shuffle * a->shuffle);
    if (a->n_up > 3 || (1 << a->n_up) < a->shuffle)
        return err_set(e, ERR_UNSUPPORTED,
                       "unsupported upscale model '%s': ESRGAN with %d upsampling convs and a "
                       "pixel-unshuffle of %d",
                       what, a->n_up, a->shuffle);
    a->scale = (1 << a->n_up) / a->shuffle;
    return 0;
}

static int detect_srvgg(const struct st_file *f, const char *what, struct ups_arch *a,
                        struct err *e)
{
    const struct st_tensor *first = st_find(f, "body.0.weight"), *last;
    int h = max_index(f, "body.");
    if (!first || first->ndim != 4 || h < 2 || h % 2 || !(last = findf(f, "body.%d.weight", h)) ||
        last->ndim != 4)
        return err_set(e, ERR_INVALID, "'%s': incomplete SRVGGNetCompact model (last conv "
                       "'body.%d')", what, h);
    a->nf = (int)first->shape[0];
    a->in_ch = a->out_ch = (int)first->shape[1];
    a->nb = (h - 2) / 2;
    int64_t co = last->shape[0], s = 1;
    while (s * s * a->out_ch < co)
        s++;
    if (a->out_ch < 1 || s * s * a->out_ch != co || s > 8)
        return err_set(e, ERR_UNSUPPORTED,
                       "unsupported upscale model '%s': SRVGGNetCompact last conv has %lld "
                       "channels, not %d x scale^2",
                       what, (long long)co, a->out_ch);
    a->scale = (int)s;
    return 0;
}

struct check {
    const struct st_file *f;
    const char *what;
    struct err *e;
    int rc;
    size_t found;
};

static void check_one(void *user, const struct ups_weight *w)
{
    struct check *c = user;
    if (c->rc < 0)
        return;
    const struct st_tensor *t = st_find(c->f, w->key);
    if (!t) {
        c->rc = err_set(c->e, ERR_INVALID, "'%s': tensor '%s' is missing", c->what, w->key);
        return;
    }
    c->found++;
    int ok = t->ndim == w->ndim;
    for (int d = 0; ok && d < w->ndim; d++)
        ok = t->shape[d] == w->shape[d];
    if (!ok) {
        char got[96];
        st_shape_str(t, got, sizeof(got));
        c->rc = err_set(c->e, ERR_INVALID, "'%s': tensor '%s' has shape %s, expected %d-D "
                        "[%lld,...]", c->what, w->key, got, w->ndim, (long long)w->shape[0]);
        return;
    }
    if (t->dtype != ST_DTYPE_F32 && t->dtype != ST_DTYPE_F16 && t->dtype != ST_DTYPE_BF16)
        c->rc = err_set(c->e, ERR_INVALID, "'%s': tensor '%s' has dtype %s, not a float",
                        c->what, w->key, st_dtype_name(t->dtype));
}

static void collect(void *user, const struct ups_weight *w)
{
    struct ups_weight **v = user;
    **v = *w;
    (*v)++;
}

static int cmp_key(const void *x, const void *y)
{
    return strcmp(((const struct ups_weight *)x)->key, ((const struct ups_weight *)y)->key);
}

/* Every tensor of the derived layout with its shape, and no other. */
static int check_all(const struct st_file *f, const char *what, const struct ups_arch *a,
                     struct err *e)
{
    struct check c = {.f = f, .what = what, .e = e};
    int n = ups_weights(a, check_one, &c);
    if (c.rc < 0 || c.found == f->n_tensors)
        return c.rc;
    /* Name the first tensor the layout does not have (sorted expected keys). */
    struct ups_weight *v = xmalloc((size_t)n * sizeof(*v)), *end = v;
    ups_weights(a, collect, &end);
    qsort(v, (size_t)n, sizeof(*v), cmp_key);
    const char *extra = "?";
    for (size_t i = 0; i < f->n_tensors; i++) {
        struct ups_weight k;
        snprintf(k.key, sizeof(k.key), "%s", f->tensors[i].name);
        if (!bsearch(&k, v, (size_t)n, sizeof(*v), cmp_key)) {
            extra = f->tensors[i].name;
            break;
        }
    }
    int rc = err_set(e, ERR_INVALID, "'%s': unexpected tensor '%s' for a %s model", what, extra,
                     a->kind == UPS_SRVGG ? "SRVGGNetCompact" : "ESRGAN");
    xfree(v);
    return rc;
}

int ups_detect(const struct st_file *f, const char *what, struct ups_arch *a, struct err *e)
{
    int rc;
    memset(a, 0, sizeof(*a));
    if (st_find(f, "conv_first.weight")) {
        a->kind = UPS_ESRGAN;
        a->naming = UPS_NAMING_NEW;
        rc = detect_esrgan(f, what, a, e);
    } else if (st_find(f, "model.0.weight") && st_find(f, "model.1.sub.0.RDB1.conv1.0.weight")) {
        a->kind = UPS_ESRGAN;
        a->naming = UPS_NAMING_OLD;
        rc = detect_esrgan(f, what, a, e);
    } else if (st_find(f, "body.0.weight") && st_find(f, "body.1.weight")) {
        a->kind = UPS_SRVGG;
        rc = detect_srvgg(f, what, a, e);
    } else {
        return err_set(e, ERR_UNSUPPORTED,
                       "unsupported upscale model '%s': not an ESRGAN (RRDBNet) or "
                       "SRVGGNetCompact state dict%s",
                       what, what_else(f));
    }
    if (rc < 0)
        return rc;
    if (a->nf < 1 || a->nf > 4096 || a->in_ch < 1 || a->in_ch > 64 || a->out_ch < 1 ||
        a->out_ch > 64 || a->nb > 4096 || (a->kind == UPS_ESRGAN && (a->gc < 1 || a->gc > 4096)))
        return err_set(e, ERR_INVALID, "'%s': implausible upscale model widths (nf %d, in %d, "
                       "out %d, blocks %d)", what, a->nf, a->in_ch, a->out_ch, a->nb);
    return check_all(f, what, a, e);
}
