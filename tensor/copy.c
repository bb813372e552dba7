/*
 * copy.c — tensor_copy between any devices and dtypes (within a backend's memory by its
 * copy member, host <-> device staged here over dev_copy), host f32 read/write, fill.
 */
#include "dispatch_impl.h"

/* ---- data movement --------------------------------------------------------------------- */

/*
 * Host <-> device (dst or src in host memory, the other on a device whose backend is
 * `be`). Moves bytes of a contiguous tensor in the device-side dtype, converting and
 * re-laying out on whichever side is cheaper to stage (be->copy on the device side,
 * tensor_copy on the host side).
 */
static int copy_host_dev(struct tensor *dst, const struct tensor *src, int hd,
                         const struct tensor__backend *be, struct err *e)
{
    int rc;
    /* The compute stream is drained first: dev_copy need not be ordered after the kernels queued
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
            if ((rc = be->copy(tmp, src, e)) < 0)
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
        rc = be->copy(dst, tmp, e);
out_h2d:
    tensor_free(stage);
    tensor_free(tmp);
    return rc;
}

int tensor_copy(struct tensor *dst, const struct tensor *src, struct err *e)
{
    char b1[96], b2[96];
    if (!dst || !src)
        return err_set(e, ERR_INVALID, "copy: missing tensor");
    if (tensor_numel(dst) != tensor_numel(src) || !tensor_same_shape(dst, src))
        return err_set(e, ERR_INVALID, "copy: shape %s into %s", shp(src, b1), shp(dst, b2));
    int hs = is_host(src), hd = is_host(dst);
    /* The device side's backend (either one when both are host memory). */
    struct dev *d = hd ? src->_storage->dev : dst->_storage->dev;
    const struct tensor__backend *be = tensor__backend_for(d);
    if (!be)
        return err_set(e, ERR_UNSUPPORTED, "copy: this build has no compute backend for '%s'",
                       dev_name(d));
    if (hs != hd)
        return copy_host_dev(dst, src, hd, be, e);
    if (src->_storage->dev != dst->_storage->dev && !hs)
        return err_set(e, ERR_UNSUPPORTED, "copy: between two %s devices", be->name);
    return be->copy(dst, src, e);
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
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs("fill", e, &be, 1, 1, t)) < 0)
        return rc;
    if ((rc = tensor__backend_check(be, !!be->fill, TENSOR__OP_FILL, t->dtype, e)) < 0)
        return rc;
    return be->fill(t, value, e);
}
