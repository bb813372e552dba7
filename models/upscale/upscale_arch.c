/*
 * Upscale model key names and tensor lists (see upscale.h): the one place that knows
 * both ESRGAN namings and the SRVGG layout.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "upscale.h"

const char *ups_key(const struct ups_arch *a, enum ups_role r, int i, int j, int k, char *out,
                    size_t size)
{
    int old = a->kind == UPS_ESRGAN && a->naming == UPS_NAMING_OLD;
    switch (r) {
    case UPS_W_FIRST: snprintf(out, size, "%s", old ? "model.0" : "conv_first"); break;
    case UPS_W_RDB:
        if (old)
            snprintf(out, size, "model.1.sub.%d.RDB%d.conv%d.0", i, j, k);
        else
            snprintf(out, size, "body.%d.rdb%d.conv%d", i, j, k);
        break;
    case UPS_W_BODY:
        if (old)
            snprintf(out, size, "model.1.sub.%d", a->nb);
        else
            snprintf(out, size, "conv_body");
        break;
    case UPS_W_UP:
        if (old)
            snprintf(out, size, "model.%d", 3 * i + 3);
        else
            snprintf(out, size, "conv_up%d", i + 1);
        break;
    case UPS_W_HR:
        if (old)
            snprintf(out, size, "model.%d", 3 * a->n_up + 2);
        else
            snprintf(out, size, "conv_hr");
        break;
    case UPS_W_LAST:
        if (old)
            snprintf(out, size, "model.%d", 3 * a->n_up + 4);
        else
            snprintf(out, size, "conv_last");
        break;
    case UPS_W_VGG: snprintf(out, size, "body.%d", 2 * i); break;
    case UPS_W_PRELU: snprintf(out, size, "body.%d", 2 * i + 1); break;
    }
    return out;
}

const char *ups_arch_str(const struct ups_arch *a, char *out, size_t size)
{
    if (a->kind == UPS_SRVGG)
        snprintf(out, size, "SRVGGNetCompact %dx nf=%d convs=%d", a->scale, a->nf, a->nb);
    else
        snprintf(out, size, "ESRGAN %dx nf=%d nb=%d gc=%d%s (%s naming)", a->scale, a->nf, a->nb,
                 a->gc, a->shuffle > 1 ? " pixel-unshuffle input" : "",
                 a->naming == UPS_NAMING_OLD ? "old" : "new");
    return out;
}

struct walk {
    const struct ups_arch *a;
    void (*fn)(void *user, const struct ups_weight *w);
    void *user;
    int n;
    char layer[32];
};

/* A 3x3 conv ci -> co: .weight and .bias. */
static void conv(struct walk *w, enum ups_role r, int i, int j, int k, int ci, int co)
{
    struct ups_weight t = {.role = r, .i = i, .j = j, .k = k, .ndim = 4, .fan_in = ci * 9};
    char p[80];
    ups_key(w->a, r, i, j, k, p, sizeof(p));
    snprintf(t.layer, sizeof(t.layer), "%s", w->layer);
    snprintf(t.key, sizeof(t.key), "%s.weight", p);
    t.shape[0] = co, t.shape[1] = ci, t.shape[2] = 3, t.shape[3] = 3;
    w->fn(w->user, &t);
    snprintf(t.key, sizeof(t.key), "%s.bias", p);
    t.ndim = 1, t.is_bias = 1, t.shape[1] = t.shape[2] = t.shape[3] = 0;
    w->fn(w->user, &t);
    w->n += 2;
}

static void layer(struct walk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void layer(struct walk *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->layer, sizeof(w->layer), fmt, ap);
    va_end(ap);
}

static void walk_esrgan(struct walk *w)
{
    const struct ups_arch *a = w->a;
    int cin = a->in_ch * a->shuffle * a->shuffle;
    layer(w, "conv_first");
    conv(w, UPS_W_FIRST, 0, 0, 0, cin, a->nf);
    for (int b = 0; b < a->nb; b++) {
        layer(w, "rrdb.%d", b);
        for (int j = 1; j <= 3; j++)
            for (int k = 1; k <= 5; k++)
                conv(w, UPS_W_RDB, b, j, k, a->nf + (k - 1) * a->gc, k == 5 ? a->nf : a->gc);
    }
    layer(w, "conv_body");
    conv(w, UPS_W_BODY, 0, 0, 0, a->nf, a->nf);
    for (int u = 0; u < a->n_up; u++) {
        layer(w, "conv_up.%d", u);
        conv(w, UPS_W_UP, u, 0, 0, a->nf, a->nf);
    }
    layer(w, "conv_hr");
    conv(w, UPS_W_HR, 0, 0, 0, a->nf, a->nf);
    layer(w, "conv_last");
    conv(w, UPS_W_LAST, 0, 0, 0, a->nf, a->out_ch);
}

static void walk_srvgg(struct walk *w)
{
    const struct ups_arch *a = w->a;
    for (int i = 0; i <= a->nb + 1; i++) {
        int ci = i == 0 ? a->in_ch : a->nf;
        int co = i == a->nb + 1 ? a->out_ch * a->scale * a->scale : a->nf;
        layer(w, "body.%d", 2 * i);
        conv(w, UPS_W_VGG, i, 0, 0, ci, co);
        if (i <= a->nb) {
            struct ups_weight t = {.role = UPS_W_PRELU, .i = i, .ndim = 1, .shape = {a->nf}};
            char p[80];
            snprintf(t.layer, sizeof(t.layer), "%s", w->layer);
            snprintf(t.key, sizeof(t.key), "%s.weight", ups_key(a, UPS_W_PRELU, i, 0, 0, p, sizeof(p)));
            w->fn(w->user, &t);
            w->n++;
        }
    }
}

int ups_weights(const struct ups_arch *a, void (*fn)(void *user, const struct ups_weight *w),
                void *user)
{
    struct walk w = {.a = a, .fn = fn, .user = user};
    if (a->kind == UPS_SRVGG)
        walk_srvgg(&w);
    else
        walk_esrgan(&w);
    return w.n;
}
