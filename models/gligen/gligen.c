/*
 * The GLIGEN forward passes (see gligen.h): the position net's input rows on the host
 * (boxes, Fourier embedding, null features), its three linears and every fuser on the
 * model's device through the patcher.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "gligen.h"
#include "nn.h"

/* A host copy of weight `key` as f32 (n floats expected), from the unpatched host copy. */
static int host_weight(const struct gligen *g, const char *key, float *out, size_t n,
                       struct err *e)
{
    const struct patcher_model *m = patcher_model_of(g->p);
    int layer, idx, nd;
    int64_t shape[4];
    enum tensor_dtype dt;
    if (patcher_model_find(m, key, &layer, &idx) < 0)
        return err_set(e, ERR_NOT_FOUND, "gligen: no weight '%s'", key);
    const void *src = patcher_model_host_data(m, layer, idx, &dt, &nd, shape);
    size_t have = 1;
    for (int i = 0; i < nd; i++)
        have *= (size_t)shape[i];
    if (!src || have != n)
        return err_set(e, ERR_INVALID, "gligen: weight '%s' has %zu values, %zu expected", key,
                       have, n);
    tensor_convert_host(out, TENSOR_F32, src, dt, n);
    return 0;
}

int gligen_objs_input(const struct gligen *g, const struct gligen_box *boxes, int n,
                      int lat_h, int lat_w, float *rows, struct err *e)
{
    int in = g->a.in_dim, width = in + GLIGEN_POS_DIM;
    float null_pos[GLIGEN_POS_DIM], freq[GLIGEN_FREQS];
    int rc;
    if (n > GLIGEN_MAX_OBJS)
        return err_set(e, ERR_INVALID, "GLIGEN takes at most %d text boxes, got %d",
                       GLIGEN_MAX_OBJS, n);
    if (lat_h < 1 || lat_w < 1)
        return err_set(e, ERR_INVALID, "gligen: empty latent");
    if ((rc = host_weight(g, "position_net.null_position_feature", null_pos, GLIGEN_POS_DIM,
                          e)) < 0)
        return rc;
    /* unused slots: the null text feature (masks 0) */
    for (int s = n; s < GLIGEN_MAX_OBJS; s++) {
        float *r = rows + (size_t)s * width;
        if ((rc = host_weight(g, "position_net.null_positive_feature", r, (size_t)in, e)) < 0)
            return rc;
        memcpy(r + in, null_pos, sizeof null_pos);
    }
    /* FourierEmbedder: temperature 100 ** (arange(8) / 8), float32 like torch's */
    for (int k = 0; k < GLIGEN_FREQS; k++)
        freq[k] = powf(100.0f, (float)k / (float)GLIGEN_FREQS);
    for (int s = 0; s < n; s++) {
        const struct gligen_box *b = &boxes[s];
        float *r = rows + (size_t)s * width;
        /* set_position: (x1, y1, x2, y2) = (x/w, y/h, (x+w)/w, (y+h)/h) in Python floats,
         * stored float32 */
        float xy[4] = {(float)((double)b->x / lat_w), (float)((double)b->y / lat_h),
                       (float)((double)(b->x + b->w) / lat_w),
                       (float)((double)(b->y + b->h) / lat_h)};
        memcpy(r, b->pooled, (size_t)in * sizeof *r);
        /* cat([sin(f0 x), cos(f0 x), sin(f1 x), ...]) over the last dim (4 coordinates) */
        for (int k = 0; k < GLIGEN_FREQS; k++)
            for (int c = 0; c < 4; c++) {
                r[in + k * 8 + c] = sinf(freq[k] * xy[c]);
                r[in + k * 8 + 4 + c] = cosf(freq[k] * xy[c]);
            }
    }
    return 0;
}

int gligen_objs(struct gligen *g, const struct gligen_box *boxes, int n, int lat_h, int lat_w,
                struct tensor *objs, struct err *e)
{
    struct dev *d = patcher_device(g->p);
    int64_t B = objs->shape[0], width = g->a.in_dim + GLIGEN_POS_DIM;
    size_t one = (size_t)GLIGEN_MAX_OBJS * width;
    struct tensor *in = NULL, *h1 = NULL, *h2 = NULL;
    const struct tensor *w0, *b0, *w2, *b2, *w4, *b4;
    float *rows = NULL;
    struct nn_w w;
    int rc;
    if (!d)
        return err_set(e, ERR_INVALID, "gligen: model is not loaded (call mm_load_models first)");
    if (objs->ndim != 3 || objs->shape[1] != GLIGEN_MAX_OBJS || objs->shape[2] != g->a.key_dim)
        return err_set(e, ERR_INVALID, "gligen: objs must be [B, %d, %d]", GLIGEN_MAX_OBJS,
                       g->a.key_dim);
    nn__w_init(&w, g->p, "", e);
    if ((rc = xtry_malloc((size_t)B * one * sizeof *rows, (void **)&rows, e)) < 0)
        goto fail;
    NN_TRY(gligen_objs_input(g, boxes, n, lat_h, lat_w, rows, e));
    for (int64_t b = 1; b < B; b++) /* .repeat(batch, 1, 1) */
        memcpy(rows + b * one, rows, one * sizeof *rows);
    NN_TRY(nn__new(d, &in, e, 3, B, (int64_t)GLIGEN_MAX_OBJS, width));
    NN_TRY(tensor_write_f32(in, rows, (int64_t)(B * one), e));
    NN_W(w0, &w, "position_net.linears.0.weight");
    NN_W(b0, &w, "position_net.linears.0.bias");
    NN_W(w2, &w, "position_net.linears.2.weight");
    NN_W(b2, &w, "position_net.linears.2.bias");
    NN_W(w4, &w, "position_net.linears.4.weight");
    NN_W(b4, &w, "position_net.linears.4.bias");
    NN_TRY(nn__new(d, &h1, e, 3, B, (int64_t)GLIGEN_MAX_OBJS, (int64_t)GLIGEN_HIDDEN));
    NN_TRY(nn__new(d, &h2, e, 3, B, (int64_t)GLIGEN_MAX_OBJS, (int64_t)GLIGEN_HIDDEN));
    NN_TRY(tensor_linear(h1, in, w0, b0, e));
    NN_TRY(tensor_silu(h1, h1, e));
    NN_TRY(tensor_linear(h2, h1, w2, b2, e));
    NN_TRY(tensor_silu(h2, h2, e));
    NN_TRY(tensor_linear(objs, h2, w4, b4, e));
fail:
    nn__w_release(&w);
    xfree(rows);
    tensor_free(in);
    tensor_free(h1);
    tensor_free(h2);
    return rc;
}

/* x += gate · to_out(attention(q(n_x), k(cat), v(cat))): the visual rows of the
 * attention over cat(x, objs) (a row's output depends on its query alone). */
static int fuse_attn(struct nn_w *w, struct dev *d, const char *p, int heads, float gate,
                     const struct tensor *nx, const struct tensor *cat, struct tensor *x,
                     struct err *e)
{
    const struct tensor *wq, *wk, *wv, *wo, *bo;
    struct tensor *q = NULL, *k = NULL, *v = NULL, *a = NULL, *o = NULL;
    int64_t B = nx->shape[0], T = nx->shape[1], C = nx->shape[2], S = cat->shape[1];
    int rc;
    NN_W(wq, w, "%sattn.to_q.weight", p);
    NN_W(wk, w, "%sattn.to_k.weight", p);
    NN_W(wv, w, "%sattn.to_v.weight", p);
    NN_W(wo, w, "%sattn.to_out.0.weight", p);
    NN_W(bo, w, "%sattn.to_out.0.bias", p);
    NN_TRY(nn__new(d, &q, e, 3, B, T, C));
    NN_TRY(nn__new(d, &k, e, 3, B, S, C));
    NN_TRY(nn__new(d, &v, e, 3, B, S, C));
    NN_TRY(tensor_linear(q, nx, wq, NULL, e));
    NN_TRY(tensor_linear(k, cat, wk, NULL, e));
    NN_TRY(tensor_linear(v, cat, wv, NULL, e));
    NN_TRY(nn__new(d, &a, e, 3, B, T, C));
    NN_TRY(tensor_attention(a, q, k, v, heads, 0.0f, 0, e));
    NN_TRY(nn__new(d, &o, e, 3, B, T, C));
    NN_TRY(tensor_linear(o, a, wo, bo, e));
    NN_TRY(tensor_axpby(x, 1.0f, x, gate, o, e));
fail:
    tensor_free(q);
    tensor_free(k);
    tensor_free(v);
    tensor_free(a);
    tensor_free(o);
    return rc;
}

/* x += gate · ff(norm2(x)), ff = net.2(GEGLU(net.0.proj)). */
static int fuse_ff(struct nn_w *w, struct dev *d, const char *p, float gate, struct tensor *x,
                   struct err *e)
{
    const struct tensor *nw, *nb, *f0w, *f0b, *f2w, *f2b;
    struct tensor *n = NULL, *gg = NULL, *f = NULL;
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2];
    int rc;
    NN_W(nw, w, "%snorm2.weight", p);
    NN_W(nb, w, "%snorm2.bias", p);
    NN_W(f0w, w, "%sff.net.0.proj.weight", p);
    NN_W(f0b, w, "%sff.net.0.proj.bias", p);
    NN_W(f2w, w, "%sff.net.2.weight", p);
    NN_W(f2b, w, "%sff.net.2.bias", p);
    NN_TRY(nn__new(d, &n, e, 3, B, T, C));
    NN_TRY(tensor_layer_norm(n, x, nw, nb, 1e-5f, e));
    NN_TRY(nn__new(d, &gg, e, 3, B, T, 4 * C));
    NN_TRY(tensor_linear_geglu(gg, n, f0w, f0b, e));
    tensor_free(n);
    n = NULL;
    NN_TRY(nn__new(d, &f, e, 3, B, T, C));
    NN_TRY(tensor_linear(f, gg, f2w, f2b, e));
    NN_TRY(tensor_axpby(x, 1.0f, x, gate, f, e));
fail:
    tensor_free(n);
    tensor_free(gg);
    tensor_free(f);
    return rc;
}

int gligen_fuse(struct gligen *g, int k, const struct tensor *objs, struct tensor *x,
                struct err *e)
{
    struct dev *d = patcher_device(g->p);
    struct tensor *op = NULL, *nx = NULL, *no = NULL, *cat = NULL;
    const struct tensor *lw, *lb, *n1w, *n1b;
    struct nn_w w;
    char p[32];
    int rc;
    if (!d)
        return err_set(e, ERR_INVALID, "gligen: model is not loaded (call mm_load_models first)");
    if (k < 0 || k >= g->a.n_modules)
        return err_set(e, ERR_INVALID,
                       "gligen: the UNet's transformer %d has no GLIGEN module (it has %d)", k,
                       g->a.n_modules);
    const struct gligen_module *m = &g->a.m[k];
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], N = objs->shape[1];
    if (x->ndim != 3 || C != m->query_dim || objs->shape[0] != B)
        return err_set(e, ERR_INVALID,
                       "gligen: module %d ('%s') is %d wide, the transformer's tokens %lld", k,
                       m->block, m->query_dim, (long long)C);
    snprintf(p, sizeof p, "fuser.%d.", k);
    nn__w_init(&w, g->p, "", e);
    NN_W(lw, &w, "%slinear.weight", p);
    NN_W(lb, &w, "%slinear.bias", p);
    NN_W(n1w, &w, "%snorm1.weight", p);
    NN_W(n1b, &w, "%snorm1.bias", p);
    NN_TRY(nn__new(d, &op, e, 3, B, N, C));
    NN_TRY(tensor_linear(op, objs, lw, lb, e));
    /* norm1 of cat(x, objs) is the two normed apart: LayerNorm is per token */
    NN_TRY(nn__new(d, &nx, e, 3, B, T, C));
    NN_TRY(tensor_layer_norm(nx, x, n1w, n1b, 1e-5f, e));
    NN_TRY(nn__new(d, &no, e, 3, B, N, C));
    NN_TRY(tensor_layer_norm(no, op, n1w, n1b, 1e-5f, e));
    NN_TRY(nn__new(d, &cat, e, 3, B, T + N, C));
    NN_TRY(tensor_concat(cat, nx, no, 1, e));
    tensor_free(op);
    tensor_free(no);
    op = no = NULL;
    NN_TRY(fuse_attn(&w, d, p, m->heads, m->gate_attn, nx, cat, x, e));
    tensor_free(cat);
    tensor_free(nx);
    cat = nx = NULL;
    NN_TRY(fuse_ff(&w, d, p, m->gate_dense, x, e));
fail:
    nn__w_release(&w);
    tensor_free(op);
    tensor_free(nx);
    tensor_free(no);
    tensor_free(cat);
    return rc;
}

size_t gligen_plan_bytes(const struct gligen *g, int b, int tokens, int width)
{
    size_t B = (size_t)b, T = (size_t)tokens, C = (size_t)width, N = GLIGEN_MAX_OBJS;
    /* objs (kept for the call) and the position net's rows and hidden layers */
    size_t objs = B * N * (size_t)g->a.key_dim;
    size_t pos = B * N * ((size_t)g->a.in_dim + GLIGEN_POS_DIM + 2 * GLIGEN_HIDDEN);
    /* the fuser's attention step: nx, cat, q, k, v, a, o (the ff step is smaller: n, gg
     * 4C, f against nx, cat, q, k, v) */
    size_t attn = B * (T * C * 4 + 3 * (T + N) * C);
    size_t ff = B * T * C * 6;
    return 4 * (objs + (pos > attn && pos > ff ? pos : attn > ff ? attn : ff));
}
