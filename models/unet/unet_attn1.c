/*
 * Tiled self-attention and the attention-map reduction (see unet_attn1.h).
 */
#include "unet_attn1.h"

#include <math.h>
#include <string.h>

#include "alloc.h"

/*
 * Copy between q's token grid and the tiled layout, one (sample, tile row) at a time
 * (the rearrange needs 6 dims; views have 4): grid rows [i·th, (i+1)·th) of sample b,
 * seen as [nw, th, tw, C], against tiles (b, i, 0..nw) of the tiled tensor, contiguous
 * [nw, th·tw, C]. to_tiles picks the direction.
 */
static int move_tiles(const struct tensor *grid, const struct tensor *tiled,
                      const struct unet_attn1_tiles *t, int to_tiles, struct err *e)
{
    int64_t B = grid->shape[0], C = grid->shape[2], cols = t->cols;
    int64_t th = t->rows / t->nh, tw = cols / t->nw, L = th * tw;
    const int64_t gshape[4] = {t->nw, th, tw, C};
    const int64_t gstride[4] = {tw * C, cols * C, C, 1};
    const int64_t tstride[4] = {L * C, tw * C, C, 1};
    int rc = 0;
    for (int64_t b = 0; b < B && rc == 0; b++)
        for (int i = 0; i < t->nh && rc == 0; i++) {
            struct tensor *gv = NULL, *tv = NULL;
            int64_t goff = grid->offset + (b * t->rows * cols + i * th * cols) * C;
            int64_t toff = tiled->offset + ((b * t->nh + i) * t->nw) * L * C;
            if ((rc = tensor_view(grid, 4, gshape, gstride, goff, &gv, e)) == 0 &&
                (rc = tensor_view(tiled, 4, gshape, tstride, toff, &tv, e)) == 0)
                rc = to_tiles ? tensor_copy(tv, gv, e) : tensor_copy(gv, tv, e);
            tensor_free(gv);
            tensor_free(tv);
        }
    return rc;
}

int unet_attn1_tiled(struct tensor *out, const struct tensor *q, const struct tensor *k,
                     const struct tensor *v, int heads, const struct unet_attn1_tiles *t,
                     struct err *e)
{
    int64_t B = q->shape[0], T = q->shape[1], C = q->shape[2];
    int64_t n = (int64_t)t->nh * t->nw;
    if (t->nh < 1 || t->nw < 1 || t->rows * t->cols != T || t->rows % t->nh ||
        t->cols % t->nw || !tensor_is_contiguous(q) || !tensor_is_contiguous(k) ||
        !tensor_is_contiguous(v) || !tensor_is_contiguous(out))
        return err_set(e, ERR_INVALID, "attn1 tiling %dx%d of a %lldx%lld grid does not fit "
                                       "%lld tokens", t->nh, t->nw, (long long)t->rows,
                       (long long)t->cols, (long long)T);
    const int64_t ts[3] = {B * n, T / n, C};
    struct tensor *qt = NULL, *ot = NULL, *kv = NULL, *vv = NULL;
    int rc;
    /* the keys and values need no copy: (b nh nw) batches of consecutive tokens */
    if ((rc = tensor_new(tensor_dev(q), TENSOR_F32, 3, ts, &qt, e)) < 0 ||
        (rc = tensor_new(tensor_dev(q), TENSOR_F32, 3, ts, &ot, e)) < 0 ||
        (rc = tensor_reshape(k, 3, ts, &kv, e)) < 0 || (rc = tensor_reshape(v, 3, ts, &vv, e)) < 0)
        goto out;
    if ((rc = move_tiles(q, qt, t, 1, e)) < 0 ||
        (rc = tensor_attention(ot, qt, kv, vv, heads, 0.0f, 0, e)) < 0)
        goto out;
    rc = move_tiles(out, ot, t, 0, e); /* hypertile_out: back to the grid's order */
out:
    tensor_free(qt);
    tensor_free(ot);
    tensor_free(kv);
    tensor_free(vv);
    return rc;
}

/* Sample b's rows of x [B, T, C] on the host (x may be a device tensor). */
static int read_sample(const struct tensor *x, int64_t b, float *dst, struct err *e)
{
    struct tensor *s = NULL;
    int rc = tensor_slice(x, 0, b, 1, &s, e);
    if (rc == 0)
        rc = tensor_read_f32(s, dst, x->shape[1] * x->shape[2], e);
    tensor_free(s);
    return rc;
}

int unet_attn1_colsum(const struct tensor *q, const struct tensor *k, int heads, int64_t b0,
                      int64_t nb, double *colsum, struct err *e)
{
    int64_t T = q->shape[1], C = q->shape[2], S = k->shape[1], d = C / heads;
    if (b0 < 0 || nb < 1 || b0 + nb > q->shape[0] || k->shape[0] != q->shape[0] ||
        k->shape[2] != C || S != T || d * heads != C)
        return err_set(e, ERR_INVALID, "attention scores: bad shapes or samples");
    size_t row = (size_t)T * C;
    float *qh = NULL, *kh = NULL;
    double *p = NULL;
    int rc;
    if ((rc = xtry_malloc(row * sizeof *qh, (void **)&qh, e)) < 0 ||
        (rc = xtry_malloc(row * sizeof *kh, (void **)&kh, e)) < 0 ||
        (rc = xtry_malloc((size_t)S * sizeof *p, (void **)&p, e)) < 0)
        goto out;
    double scale = 1.0 / sqrt((double)d);
    for (int64_t b = 0; b < nb && rc == 0; b++) {
        double *cs = colsum + b * S;
        if ((rc = read_sample(q, b0 + b, qh, e)) < 0 || (rc = read_sample(k, b0 + b, kh, e)) < 0)
            break;
        memset(cs, 0, (size_t)S * sizeof *cs);
        for (int h = 0; h < heads; h++)
            for (int64_t i = 0; i < T; i++) {
                const float *qi = qh + i * C + h * d;
                double mx = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j < S; j++) {
                    const float *kj = kh + j * C + h * d;
                    double dot = 0.0;
                    for (int64_t c = 0; c < d; c++)
                        dot += (double)qi[c] * kj[c];
                    p[j] = dot * scale;
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int64_t j = 0; j < S; j++)
                    sum += p[j] = exp(p[j] - mx);
                for (int64_t j = 0; j < S; j++)
                    cs[j] += p[j] / sum / heads;
            }
    }
out:
    xfree(qh);
    xfree(kh);
    xfree(p);
    return rc;
}
