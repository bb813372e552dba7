/*
 * copy.c — tensor_copy between any devices and dtypes, host f32 read/write, fill.
 */
#include "dispatch_impl.h"

/* ---- data movement --------------------------------------------------------------------- */

/*
 * The copy every transformer block makes twice, [B, C, HW] <-> [B, HW, C] through a
 * permuted view: f32 on both sides, dst contiguous, src's last two dims swapped (its
 * second-to-last dim has stride 1). Done as a blocked transpose on the pool: the
 * element-wise strided walk was ~8 ms per 2 x 320 x 4096 on one core.
 */
#define TR_TILE 32

struct tr_job {
    float *dst;
    const float *src;
    int64_t sh[4], st[4]; /* src layout, 4-D right-aligned; st[2] == 1 */
    int64_t tiles_r, tiles_c;
};

static void tr_task(void *ctx, int64_t beg, int64_t end, int tid)
{
    struct tr_job *j = ctx;
    int64_t R = j->sh[2], C = j->sh[3], per = j->tiles_r * j->tiles_c;
    for (int64_t t = beg; t < end; t++) {
        int64_t b = t / per, tr = t % per / j->tiles_c, tc = t % j->tiles_c;
        int64_t b0 = b / j->sh[1], b1 = b % j->sh[1];
        const float *s = j->src + b0 * j->st[0] + b1 * j->st[1];
        float *d = j->dst + b * R * C;
        int64_t r1 = (tr + 1) * TR_TILE < R ? (tr + 1) * TR_TILE : R;
        int64_t c1 = (tc + 1) * TR_TILE < C ? (tc + 1) * TR_TILE : C;
        /* dst[r][c] = src[r + c * st3]: read along r (contiguous in src) in the inner loop */
        for (int64_t c = tc * TR_TILE; c < c1; c++)
            for (int64_t r = tr * TR_TILE; r < r1; r++)
                d[r * C + c] = s[r + c * j->st[3]];
    }
}

static int try_transpose(struct tensor *dst, const struct tensor *src)
{
    if (src->dtype != TENSOR_F32 || dst->dtype != TENSOR_F32 || !tensor_is_contiguous(dst) ||
        src->ndim < 2 || tensor_numel(dst) < 4096)
        return 0;
    struct tr_job j;
    tensor__as4d(src, j.sh, j.st);
    if (j.st[2] != 1 || j.st[3] == 1 || j.sh[2] < 2 || j.sh[3] < 2)
        return 0;
    j.dst = (float *)tensor__ptr(dst);
    j.src = (const float *)tensor__ptr(src);
    j.tiles_r = (j.sh[2] + TR_TILE - 1) / TR_TILE;
    j.tiles_c = (j.sh[3] + TR_TILE - 1) / TR_TILE;
    tensor__pool_for(j.sh[0] * j.sh[1] * j.tiles_r * j.tiles_c, tr_task, &j);
    return 1;
}

int tensor_copy(struct tensor *dst, const struct tensor *src, struct err *e)
{
    char b1[96], b2[96];
    int rc = 0;
    if (!dst || !src)
        return err_set(e, ERR_INVALID, "copy: missing tensor");
    if (tensor_numel(dst) != tensor_numel(src) || !tensor_same_shape(dst, src))
        return err_set(e, ERR_INVALID, "copy: shape %s into %s", shp(src, b1), shp(dst, b2));
    int hs = is_host(src), hd = is_host(dst);
    if (hs && hd) {
        double pt0 = tensor__prof_t0();
        if (src->dtype == dst->dtype && tensor_is_contiguous(src) && tensor_is_contiguous(dst)) {
            memmove(tensor__ptr(dst), tensor__ptr(src), tensor_nbytes(dst));
        } else if (!try_transpose(dst, src)) {
            struct hbuf h;
            const float *p = hin(src, &h);
            tensor__scatter_f32(dst, p);
            hfree(&h);
        }
        tensor__prof_end(TENSOR__PROF_COPY, pt0, 0);
        return 0;
    }
#ifdef TENSOR_HAVE_CUDA
    if (!hs && !hd) {
        if (src->_storage->dev != dst->_storage->dev)
            return err_set(e, ERR_UNSUPPORTED, "copy: between two CUDA devices");
        return tensor__cuda_copy(dst, src, e);
    }
    /* Host <-> device: move bytes of a contiguous tensor in the device-side dtype,
     * converting and re-laying out on whichever side is cheaper to stage. The compute
     * stream is drained first: dev_copy need not be ordered after the kernels queued
     * there (a non-blocking stream), and they may still read or write these bytes. */
    struct tensor *stage = NULL;
    {
        struct dev *cd = hd ? src->_storage->dev : dst->_storage->dev;
        if ((rc = dev_stream_sync(dev_compute_stream(cd))) < 0)
            return err_set(e, rc, "copy: cannot synchronise '%s'", dev_name(cd));
    }
    if (hd) { /* device -> host */
        const struct tensor *s = src;
        struct tensor *tmp = NULL;
        if (!tensor_is_contiguous(src)) {
            if ((rc = tensor_new_like(src, src->dtype, &tmp, e)) < 0)
                return rc;
            if ((rc = tensor__cuda_copy(tmp, src, e)) < 0)
                goto out_d2h;
            s = tmp;
        }
        if (dst->dtype == s->dtype && tensor_is_contiguous(dst)) {
            rc = dev_copy(s->_storage->dev, DEV_COPY_D2H, tensor__ptr(dst), tensor__ptr(s),
                          tensor_nbytes(s));
        } else {
            if ((rc = tensor__host_new(s->dtype, s->ndim, s->shape, &stage, e)) < 0)
                goto out_d2h;
            rc = dev_copy(s->_storage->dev, DEV_COPY_D2H, tensor__ptr(stage), tensor__ptr(s),
                          tensor_nbytes(s));
            if (rc >= 0)
                rc = tensor_copy(dst, stage, e);
        }
        if (rc < 0 && e && !e->code)
            err_set(e, rc, "copy: device to host failed");
    out_d2h:
        tensor_free(stage);
        tensor_free(tmp);
        return rc;
    }
    /* host -> device */
    struct tensor *tmp = NULL;
    struct tensor *d = dst;
    if (!tensor_is_contiguous(dst)) {
        if ((rc = tensor_new_like(dst, dst->dtype, &tmp, e)) < 0)
            return rc;
        d = tmp;
    }
    if (src->dtype == d->dtype && tensor_is_contiguous(src)) {
        rc = dev_copy(d->_storage->dev, DEV_COPY_H2D, tensor__ptr(d), tensor__ptr(src),
                      tensor_nbytes(src));
    } else {
        if ((rc = tensor__host_new(d->dtype, d->ndim, d->shape, &stage, e)) < 0)
            goto out_h2d;
        if ((rc = tensor_copy(stage, src, e)) < 0)
            goto out_h2d;
        rc = dev_copy(d->_storage->dev, DEV_COPY_H2D, tensor__ptr(d), tensor__ptr(stage),
                      tensor_nbytes(stage));
    }
    if (rc < 0) {
        err_set(e, rc, "copy: host to device failed");
        goto out_h2d;
    }
    if (tmp)
        rc = tensor__cuda_copy(dst, tmp, e);
out_h2d:
    tensor_free(stage);
    tensor_free(tmp);
    return rc;
#else
    (void)rc;
    return err_set(e, ERR_UNSUPPORTED, "copy: no CUDA backend in this build");
#endif
}

int tensor_write_f32(struct tensor *t, const float *src, int64_t n, struct err *e)
{
    if (!t || !src)
        return err_set(e, ERR_INVALID, "write: missing tensor or buffer");
    if (n != tensor_numel(t))
        return err_set(e, ERR_INVALID, "write: %lld values for %lld elements", (long long)n,
                       (long long)tensor_numel(t));
    if (is_host(t)) {
        tensor__scatter_f32(t, src);
        return 0;
    }
    struct tensor h;
    tensor__host_wrap(&h, (float *)src, t->ndim, t->shape);
    int rc = tensor_copy(t, &h, e);
    tensor__host_unwrap(&h);
    return rc;
}

int tensor_read_f32(const struct tensor *t, float *dst, int64_t n, struct err *e)
{
    if (!t || !dst)
        return err_set(e, ERR_INVALID, "read: missing tensor or buffer");
    if (n != tensor_numel(t))
        return err_set(e, ERR_INVALID, "read: %lld values for %lld elements", (long long)n,
                       (long long)tensor_numel(t));
    if (is_host(t)) {
        tensor__gather_f32(dst, t);
        return 0;
    }
    struct tensor h;
    tensor__host_wrap(&h, dst, t->ndim, t->shape);
    int rc = tensor_copy(&h, t, e);
    tensor__host_unwrap(&h);
    return rc;
}

int tensor_fill(struct tensor *t, float value, struct err *e)
{
    int cuda, rc;
    if ((rc = check_devs("fill", e, &cuda, 1, 1, t)) < 0)
        return rc;
    if (cuda)
        CUDA_OR(tensor__cuda_fill(t, value, e));
    struct hbuf h;
    float *p = hout(t, &h);
    int64_t n = tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        p[i] = value;
    hout_done(t, &h);
    return 0;
}
