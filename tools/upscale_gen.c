/*
 * Random-weight upscale model files (see upscale_gen.h).
 */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "upscale_gen.h"

void upscale_gen_arch_fix(struct ups_arch *a)
{
    if (a->kind != UPS_ESRGAN)
        return;
    a->shuffle = a->scale == 1 ? 4 : a->scale == 2 ? 2 : 1;
    a->n_up = a->scale == 8 ? 3 : 2;
}

void upscale_gen_opts_tiny(struct upscale_gen_opts *o, enum ups_kind kind, int scale)
{
    memset(o, 0, sizeof(*o));
    o->arch.kind = kind;
    o->arch.naming = UPS_NAMING_NEW;
    o->arch.scale = scale;
    o->arch.in_ch = o->arch.out_ch = 3;
    o->arch.nf = 8;
    o->arch.nb = 2;
    o->arch.gc = 4;
    upscale_gen_arch_fix(&o->arch);
    o->dtype = ST_DTYPE_F32;
    o->seed = 7;
}

static int64_t numel(const struct ups_weight *w)
{
    int64_t n = 1;
    for (int d = 0; d < w->ndim; d++)
        n *= w->shape[d];
    return n;
}

void upscale_gen_fill(const struct upscale_gen_opts *o, const struct ups_weight *w, float *dst)
{
    /* The stream is named by the new naming, so both namings draw the same values. */
    struct ups_arch a = o->arch;
    char p[80], name[96];
    a.naming = UPS_NAMING_NEW;
    snprintf(name, sizeof(name), "%s.%s", ups_key(&a, w->role, w->i, w->j, w->k, p, sizeof(p)),
             w->role == UPS_W_PRELU ? "prelu" : w->is_bias ? "bias" : "weight");
    int64_t n = numel(w);
    if (w->role == UPS_W_PRELU) {
        ckpt_gen_fill(o->seed, name, MODEL_INIT_BIAS, w->ndim, w->shape, dst, (uint64_t)n);
        for (int64_t i = 0; i < n; i++)
            dst[i] += 0.25f;
    } else {
        ckpt_gen_fill(o->seed, name, w->is_bias ? MODEL_INIT_BIAS : MODEL_INIT_WEIGHT, w->ndim,
                      w->shape, dst, (uint64_t)n);
    }
}

struct gen {
    const struct upscale_gen_opts *o;
    struct st_writer *w;
    struct err *e;
    int rc;
    float *buf;
    void *out;
};

static void declare(void *user, const struct ups_weight *w)
{
    struct gen *g = user;
    st_writer_add(g->w, w->key, g->o->dtype, w->ndim, w->shape);
}

static void write_one(void *user, const struct ups_weight *w)
{
    struct gen *g = user;
    if (g->rc < 0)
        return;
    int64_t n = numel(w);
    size_t es = st_dtype_size(g->o->dtype);
    g->buf = xrealloc(g->buf, (size_t)n * sizeof(float));
    g->out = xrealloc(g->out, (size_t)n * es);
    upscale_gen_fill(g->o, w, g->buf);
    uint16_t *h = g->out;
    for (int64_t i = 0; i < n; i++) {
        if (g->o->dtype == ST_DTYPE_F16)
            h[i] = tensor_f32_to_f16(g->buf[i]);
        else if (g->o->dtype == ST_DTYPE_BF16)
            h[i] = tensor_f32_to_bf16(g->buf[i]);
    }
    g->rc = st_writer_write(g->w, g->o->dtype == ST_DTYPE_F32 ? (void *)g->buf : g->out,
                            (uint64_t)n * es, g->e);
}

int upscale_gen_write(const struct upscale_gen_opts *o, const char *path, struct err *e)
{
    if (o->dtype != ST_DTYPE_F32 && o->dtype != ST_DTYPE_F16 && o->dtype != ST_DTYPE_BF16)
        return err_set(e, ERR_INVALID, "upscale_gen: dtype must be F32, F16 or BF16");
    struct gen g = {.o = o, .w = st_writer_new(), .e = e};
    ups_weights(&o->arch, declare, &g);
    if ((g.rc = st_writer_begin(g.w, path, e)) >= 0)
        ups_weights(&o->arch, write_one, &g);
    if (g.rc >= 0)
        g.rc = st_writer_finish(g.w, e);
    st_writer_free(g.w);
    xfree(g.buf);
    xfree(g.out);
    return g.rc;
}
