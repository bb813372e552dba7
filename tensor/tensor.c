/*
 * tensor.c — tensor objects, refcounted storage and views.
 *
 * Every tensor object owns exactly one reference to its storage; views copy
 * the metadata and take another reference, so freeing the original does not
 * invalidate a view.
 */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "tensor_impl.h"

size_t tensor_dtype_size(enum tensor_dtype dt)
{
    return dt == TENSOR_F32 ? 4 : 2;
}

const char *tensor_dtype_name(enum tensor_dtype dt)
{
    switch (dt) {
    case TENSOR_F32: return "f32";
    case TENSOR_F16: return "f16";
    case TENSOR_BF16: return "bf16";
    }
    return "?";
}

static int dtype_valid(enum tensor_dtype dt)
{
    return dt == TENSOR_F32 || dt == TENSOR_F16 || dt == TENSOR_BF16;
}

void tensor__contig_strides(int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= shape[i];
    }
}

static int check_shape(int ndim, const int64_t *shape, struct err *e)
{
    if (ndim < 1 || ndim > TENSOR_MAX_DIMS)
        return err_set(e, ERR_INVALID, "tensor: %d dims (1..%d supported)", ndim,
                       TENSOR_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1)
            return err_set(e, ERR_INVALID, "tensor: dim %d is %lld", i, (long long)shape[i]);
        if (n > INT64_MAX / 8 / shape[i])
            return err_set(e, ERR_TOO_LARGE, "tensor: shape too large");
        n *= shape[i];
    }
    return 0;
}

static struct tensor *tensor_wrap(struct tensor_storage *s, enum tensor_dtype dt, int ndim,
                                  const int64_t *shape)
{
    struct tensor *t = xcalloc(1, sizeof(*t));
    t->ndim = ndim;
    t->dtype = dt;
    for (int i = 0; i < TENSOR_MAX_DIMS; i++) {
        t->shape[i] = i < ndim ? shape[i] : 1;
        t->stride[i] = 1;
    }
    tensor__contig_strides(ndim, t->shape, t->stride);
    t->_storage = s;
    return t;
}

int tensor_new(struct dev *d, enum tensor_dtype dt, int ndim, const int64_t *shape,
               struct tensor **out, struct err *e)
{
    int rc;
    *out = NULL;
    if (!d || !dtype_valid(dt))
        return err_set(e, ERR_INVALID, "tensor: no device or bad dtype %d", (int)dt);
    if ((rc = check_shape(ndim, shape, e)) < 0)
        return rc;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    size_t bytes = (size_t)n * tensor_dtype_size(dt);
    void *data = NULL;
    if ((rc = dev_alloc(d, bytes, &data)) < 0) {
        /* ComfyUI's (torch's) out-of-memory shape, with the size asked for. */
        char want[32];
        return err_set(e, rc, "Allocation on device %s failed (out of memory): tried to allocate "
                       "%s (%zu bytes)", dev_name(d), alloc_fmt_bytes(want, bytes), bytes);
    }
    struct tensor_storage *s = xcalloc(1, sizeof(*s));
    s->dev = d;
    s->data = data;
    s->bytes = bytes;
    atomic_init(&s->refs, 1);
    *out = tensor_wrap(s, dt, ndim, shape);
    return 0;
}

int tensor_new_zeros(struct dev *d, enum tensor_dtype dt, int ndim, const int64_t *shape,
                     struct tensor **out, struct err *e)
{
    int rc = tensor_new(d, dt, ndim, shape, out, e);
    if (rc < 0)
        return rc;
    if ((rc = tensor_fill(*out, 0.0f, e)) < 0) {
        tensor_free(*out);
        *out = NULL;
    }
    return rc;
}

int tensor_new_like(const struct tensor *t, enum tensor_dtype dt, struct tensor **out,
                    struct err *e)
{
    return tensor_new(tensor_dev(t), dt, t->ndim, t->shape, out, e);
}

int tensor_new_external(struct dev *d, enum tensor_dtype dt, int ndim, const int64_t *shape,
                        void *data, void (*release)(void *user, void *data), void *user,
                        struct tensor **out, struct err *e)
{
    int rc;
    *out = NULL;
    if (!d || !data || !dtype_valid(dt))
        return err_set(e, ERR_INVALID, "tensor: external tensor without device or data");
    if ((rc = check_shape(ndim, shape, e)) < 0)
        return rc;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    struct tensor_storage *s = xcalloc(1, sizeof(*s));
    s->dev = d;
    s->data = data;
    s->bytes = (size_t)n * tensor_dtype_size(dt);
    s->release = release;
    s->user = user;
    s->external = 1;
    atomic_init(&s->refs, 1);
    *out = tensor_wrap(s, dt, ndim, shape);
    return 0;
}

static void storage_unref(struct tensor_storage *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    if (s->external) {
        if (s->release)
            s->release(s->user, s->data);
    } else if (!s->dev) {
        xfree_aligned(s->data);
    } else {
        dev_free(s->dev, s->data);
    }
    xfree(s);
}

void tensor_free(struct tensor *t)
{
    if (!t)
        return;
    storage_unref(t->_storage);
    xfree(t);
}

struct dev *tensor_dev(const struct tensor *t)
{
    return t->_storage->dev;
}

int64_t tensor_numel(const struct tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

size_t tensor_nbytes(const struct tensor *t)
{
    return (size_t)tensor_numel(t) * tensor_dtype_size(t->dtype);
}

int tensor_is_contiguous(const struct tensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s)
            return 0;
        s *= t->shape[i];
    }
    return 1;
}

int tensor_same_shape(const struct tensor *a, const struct tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

void *tensor_data(const struct tensor *t)
{
    return tensor__ptr(t);
}

const char *tensor_shape_str(const struct tensor *t, char *buf, size_t size)
{
    size_t o = 0;
    if (!size)
        return buf;
    buf[0] = 0;
    o += (size_t)snprintf(buf + o, size - o, "[");
    for (int i = 0; i < t->ndim && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    if (o < size)
        snprintf(buf + o, size - o, "] %s", tensor_dtype_name(t->dtype));
    return buf;
}

/* ---- host staging tensors (no device) -------------------------------------------------- */

int tensor__host_new(enum tensor_dtype dt, int ndim, const int64_t *shape, struct tensor **out,
                     struct err *e)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    size_t bytes = (size_t)n * tensor_dtype_size(dt);
    void *data = NULL;
    /* A staging copy of an activation: its size follows the request, so fallible. */
    int rc = xtry_malloc_aligned(64, bytes ? bytes : 1, &data, e);
    if (rc < 0)
        return rc;
    struct tensor_storage *s = xcalloc(1, sizeof(*s));
    s->bytes = bytes;
    s->data = data;
    atomic_init(&s->refs, 1);
    *out = tensor_wrap(s, dt, ndim, shape);
    return 0;
}

void tensor__host_wrap(struct tensor *t, float *data, int ndim, const int64_t *shape)
{
    struct tensor_storage *s = xcalloc(1, sizeof(*s));
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    s->data = data;
    s->bytes = (size_t)n * sizeof(float);
    s->external = 1;
    atomic_init(&s->refs, 1);
    memset(t, 0, sizeof(*t));
    t->ndim = ndim;
    t->dtype = TENSOR_F32;
    for (int i = 0; i < TENSOR_MAX_DIMS; i++)
        t->shape[i] = i < ndim ? shape[i] : 1;
    tensor__contig_strides(ndim, t->shape, t->stride);
    for (int i = ndim; i < TENSOR_MAX_DIMS; i++)
        t->stride[i] = 1;
    t->_storage = s;
}

void tensor__host_unwrap(struct tensor *t)
{
    storage_unref(t->_storage);
    t->_storage = NULL;
}

/* ---- views ---------------------------------------------------------------------------- */

static struct tensor *view_of(const struct tensor *t)
{
    struct tensor *v = xmalloc(sizeof(*v));
    *v = *t;
    atomic_fetch_add(&t->_storage->refs, 1);
    return v;
}

/* The highest element index + 1 the view touches must lie inside the storage. */
static int view_in_bounds(const struct tensor *v)
{
    if (v->offset < 0)
        return 0;
    int64_t last = v->offset;
    for (int i = 0; i < v->ndim; i++) {
        if (v->stride[i] < 0)
            return 0;
        last += (v->shape[i] - 1) * v->stride[i];
    }
    return (size_t)(last + 1) * tensor_dtype_size(v->dtype) <= v->_storage->bytes;
}

int tensor_reshape(const struct tensor *t, int ndim, const int64_t *shape, struct tensor **out,
                   struct err *e)
{
    char b[96];
    int64_t s[TENSOR_MAX_DIMS];
    int infer = -1;
    int64_t known = 1;
    *out = NULL;
    if (ndim < 1 || ndim > TENSOR_MAX_DIMS)
        return err_set(e, ERR_INVALID, "reshape: %d dims", ndim);
    for (int i = 0; i < ndim; i++) {
        s[i] = shape[i];
        if (s[i] == -1 && infer < 0) {
            infer = i;
        } else if (s[i] < 1) {
            return err_set(e, ERR_INVALID, "reshape: dim %d is %lld", i, (long long)s[i]);
        } else {
            known *= s[i];
        }
    }
    int64_t n = tensor_numel(t);
    if (infer >= 0) {
        if (n % known)
            return err_set(e, ERR_INVALID, "reshape: cannot infer a dim for %s",
                           tensor_shape_str(t, b, sizeof(b)));
        s[infer] = n / known;
        known *= s[infer];
    }
    if (known != n)
        return err_set(e, ERR_INVALID, "reshape: %lld elements into %s",
                       (long long)known, tensor_shape_str(t, b, sizeof(b)));
    if (!tensor_is_contiguous(t))
        return err_set(e, ERR_INVALID, "reshape: %s is not contiguous",
                       tensor_shape_str(t, b, sizeof(b)));
    struct tensor *v = view_of(t);
    v->ndim = ndim;
    for (int i = 0; i < TENSOR_MAX_DIMS; i++)
        v->shape[i] = i < ndim ? s[i] : 1;
    tensor__contig_strides(ndim, v->shape, v->stride);
    for (int i = ndim; i < TENSOR_MAX_DIMS; i++)
        v->stride[i] = 1;
    *out = v;
    return 0;
}

int tensor_slice(const struct tensor *t, int dim, int64_t start, int64_t len,
                 struct tensor **out, struct err *e)
{
    *out = NULL;
    if (dim < 0 || dim >= t->ndim || start < 0 || len < 1 || start + len > t->shape[dim])
        return err_set(e, ERR_INVALID, "slice: [%lld, %lld) of dim %d (size %lld)",
                       (long long)start, (long long)(start + len), dim,
                       dim >= 0 && dim < t->ndim ? (long long)t->shape[dim] : 0LL);
    struct tensor *v = view_of(t);
    v->offset += start * t->stride[dim];
    v->shape[dim] = len;
    *out = v;
    return 0;
}

int tensor_permute(const struct tensor *t, const int *perm, struct tensor **out, struct err *e)
{
    int seen = 0;
    *out = NULL;
    for (int i = 0; i < t->ndim; i++) {
        if (perm[i] < 0 || perm[i] >= t->ndim || (seen & (1 << perm[i])))
            return err_set(e, ERR_INVALID, "permute: not a permutation of %d dims", t->ndim);
        seen |= 1 << perm[i];
    }
    struct tensor *v = view_of(t);
    for (int i = 0; i < t->ndim; i++) {
        v->shape[i] = t->shape[perm[i]];
        v->stride[i] = t->stride[perm[i]];
    }
    *out = v;
    return 0;
}

int tensor_view(const struct tensor *t, int ndim, const int64_t *shape, const int64_t *stride,
                int64_t offset, struct tensor **out, struct err *e)
{
    int rc;
    *out = NULL;
    if ((rc = check_shape(ndim, shape, e)) < 0)
        return rc;
    struct tensor *v = view_of(t);
    v->ndim = ndim;
    v->offset = offset;
    for (int i = 0; i < TENSOR_MAX_DIMS; i++) {
        v->shape[i] = i < ndim ? shape[i] : 1;
        v->stride[i] = i < ndim ? stride[i] : 1;
    }
    if (!view_in_bounds(v)) {
        tensor_free(v);
        return err_set(e, ERR_INVALID, "view: outside its storage (%zu bytes)",
                       t->_storage->bytes);
    }
    *out = v;
    return 0;
}

/* ---- strided host walks ------------------------------------------------------------------ */

/* Visit the tensor as rows of its last dim; fn gets the row's start element pointer. */
static inline float load_elem(const char *p, enum tensor_dtype dt)
{
    switch (dt) {
    case TENSOR_F32: return *(const float *)p;
    case TENSOR_F16: return tensor_f16_to_f32(*(const uint16_t *)p);
    default: return tensor_bf16_to_f32(*(const uint16_t *)p);
    }
}

static inline void store_elem(char *p, enum tensor_dtype dt, float v)
{
    switch (dt) {
    case TENSOR_F32: *(float *)p = v; break;
    case TENSOR_F16: *(uint16_t *)p = tensor_f32_to_f16(v); break;
    default: *(uint16_t *)p = tensor_f32_to_bf16(v); break;
    }
}

void tensor__as4d(const struct tensor *t, int64_t *sh, int64_t *st)
{
    int pad = TENSOR_MAX_DIMS - t->ndim;
    for (int i = 0; i < TENSOR_MAX_DIMS; i++) {
        sh[i] = i < pad ? 1 : t->shape[i - pad];
        st[i] = i < pad ? 0 : t->stride[i - pad];
    }
}

void tensor__gather_f32(float *dst, const struct tensor *t)
{
    size_t es = tensor_dtype_size(t->dtype);
    if (tensor_is_contiguous(t)) {
        tensor_convert_host(dst, TENSOR_F32, tensor__ptr(t), t->dtype, (size_t)tensor_numel(t));
        return;
    }
    const char *base = tensor__ptr(t);
    int64_t sh[4], st[4];
    tensor__as4d(t, sh, st);
    int64_t n3 = sh[3], s3 = st[3];
    for (int64_t i0 = 0; i0 < sh[0]; i0++)
        for (int64_t i1 = 0; i1 < sh[1]; i1++)
            for (int64_t i2 = 0; i2 < sh[2]; i2++) {
                const char *row = base + (size_t)(i0 * st[0] + i1 * st[1] + i2 * st[2]) * es;
                if (s3 == 1) {
                    tensor_convert_host(dst, TENSOR_F32, row, t->dtype, (size_t)n3);
                } else {
                    for (int64_t i3 = 0; i3 < n3; i3++)
                        dst[i3] = load_elem(row + (size_t)(i3 * s3) * es, t->dtype);
                }
                dst += n3;
            }
}

void tensor__scatter_f32(struct tensor *t, const float *src)
{
    size_t es = tensor_dtype_size(t->dtype);
    if (tensor_is_contiguous(t)) {
        tensor_convert_host(tensor__ptr(t), t->dtype, src, TENSOR_F32, (size_t)tensor_numel(t));
        return;
    }
    char *base = tensor__ptr(t);
    int64_t sh[4], st[4];
    tensor__as4d(t, sh, st);
    int64_t n3 = sh[3], s3 = st[3];
    for (int64_t i0 = 0; i0 < sh[0]; i0++)
        for (int64_t i1 = 0; i1 < sh[1]; i1++)
            for (int64_t i2 = 0; i2 < sh[2]; i2++) {
                char *row = base + (size_t)(i0 * st[0] + i1 * st[1] + i2 * st[2]) * es;
                if (s3 == 1) {
                    tensor_convert_host(row, t->dtype, src, TENSOR_F32, (size_t)n3);
                } else {
                    for (int64_t i3 = 0; i3 < n3; i3++)
                        store_elem(row + (size_t)(i3 * s3) * es, t->dtype, src[i3]);
                }
                src += n3;
            }
}
