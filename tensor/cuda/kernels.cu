/*
 * kernels.cu — the CUDA backend's non-GEMM ops: copies, elementwise, norms,
 * softmax, resampling, embeddings. Elementwise kernels take any strides (so
 * views need no copies); the row kernels (norms, softmax, geglu) take
 * contiguous operands, converted by cu_contig when needed. Statistics and
 * softmax run in f32 whatever the storage dtype (sd15.md §8.2-8.3).
 */
#include <math.h>

#include "cuda_common.cuh"

/* ---- copy / fill -------------------------------------------------------------------- */

__global__ void k_copy(void *dst, int ddt, cu_lay dl, const void *src, int sdt, cu_lay sl,
                       int64_t n)
{
    CU_FOR(i, n) st(dst, ddt, cu_off(dl, i), ld(src, sdt, cu_off(sl, i)));
}

int tensor__cuda_copy(struct tensor *dst, const struct tensor *src, struct err *e)
{
    int64_t n = tensor_numel(dst);
    k_copy<<<cu_blocks(n, 256), 256, 0, cu_stream(dst)>>>(tensor_data(dst), dst->dtype,
                                                         cu_layout(dst), tensor_data(src),
                                                         src->dtype, cu_layout(src), n);
    LAUNCH_CHECK();
    return 0;
}

int cu_contig(const struct tensor *t, enum tensor_dtype dt, struct tensor **tmp,
              const struct tensor **out, struct err *e)
{
    *tmp = NULL;
    *out = t;
    if (!t || (t->dtype == dt && tensor_is_contiguous(t)))
        return 0;
    int rc = tensor_new_like(t, dt, tmp, e);
    if (rc < 0)
        return rc;
    tensor__cuda_copy(*tmp, t, e);
    *out = *tmp;
    return 0;
}

__global__ void k_fill(void *dst, int dt, cu_lay l, float v, int64_t n)
{
    CU_FOR(i, n) st(dst, dt, cu_off(l, i), v);
}

int tensor__cuda_fill(struct tensor *t, float value, struct err *e)
{
    int64_t n = tensor_numel(t);
    k_fill<<<cu_blocks(n, 256), 256, 0, cu_stream(t)>>>(tensor_data(t), t->dtype, cu_layout(t),
                                                       value, n);
    LAUNCH_CHECK();
    return 0;
}

/* ---- elementwise ---------------------------------------------------------------------- */

static __device__ float act(float x, int kind, float p0, float p1)
{
    switch (kind) {
    case TENSOR__SILU: return x / (1.0f + expf(-x));
    case TENSOR__GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case TENSOR__QUICK_GELU: return x / (1.0f + expf(-1.702f * x));
    case TENSOR__SCALE: return x * p0;
    case TENSOR__LEAKY_RELU: return x >= 0.0f ? x : x * p0;
    default: return fminf(fmaxf(x, p0), p1);
    }
}

__global__ void k_unary(void *o, int odt, cu_lay ol, const void *x, int xdt, cu_lay xl, int kind,
                        float p0, float p1, int64_t n)
{
    CU_FOR(i, n) st(o, odt, cu_off(ol, i), act(ld(x, xdt, cu_off(xl, i)), kind, p0, p1));
}

int tensor__cuda_unary(struct tensor *out, const struct tensor *x, enum tensor__unary kind,
                       float p0, float p1, struct err *e)
{
    int64_t n = tensor_numel(out);
    k_unary<<<cu_blocks(n, 256), 256, 0, cu_stream(out)>>>(
        tensor_data(out), out->dtype, cu_layout(out), tensor_data(x), x->dtype, cu_layout(x),
        (int)kind, p0, p1, n);
    LAUNCH_CHECK();
    return 0;
}

/* Layout of t broadcast against out's shape: size-1 dims get stride 0. */
static cu_lay bcast(const struct tensor *t, const struct tensor *out)
{
    cu_lay l = cu_layout(t), o = cu_layout(out);
    for (int i = 0; i < 4; i++) {
        if (l.sh[i] == 1 && o.sh[i] != 1)
            l.st[i] = 0;
        l.sh[i] = o.sh[i];
    }
    return l;
}

__global__ void k_binary(void *o, int odt, cu_lay ol, const void *a, int adt, cu_lay al,
                         const void *b, int bdt, cu_lay bl, int mul, int64_t n)
{
    CU_FOR(i, n)
    {
        float x = ld(a, adt, cu_off(al, i)), y = ld(b, bdt, cu_off(bl, i));
        st(o, odt, cu_off(ol, i), mul ? x * y : x + y);
    }
}

int tensor__cuda_binary(struct tensor *out, const struct tensor *a, const struct tensor *b,
                        int mul, struct err *e)
{
    int64_t n = tensor_numel(out);
    k_binary<<<cu_blocks(n, 256), 256, 0, cu_stream(out)>>>(
        tensor_data(out), out->dtype, cu_layout(out), tensor_data(a), a->dtype, bcast(a, out),
        tensor_data(b), b->dtype, bcast(b, out), mul, n);
    LAUNCH_CHECK();
    return 0;
}

struct lc_args {
    const void *p[8];
    int dt[8];
    cu_lay l[8];
    float c[8];
    int n_in;
};

__global__ void k_lincomb(void *o, int odt, cu_lay ol, lc_args a, int64_t n)
{
    CU_FOR(i, n)
    {
        float acc = 0.0f;
        for (int k = 0; k < a.n_in; k++)
            acc += a.c[k] * ld(a.p[k], a.dt[k], cu_off(a.l[k], i));
        st(o, odt, cu_off(ol, i), acc);
    }
}

int tensor__cuda_lincomb(struct tensor *out, int n, const float *coef,
                         const struct tensor *const *in, struct err *e)
{
    lc_args a;
    a.n_in = n;
    for (int k = 0; k < n; k++) {
        a.p[k] = tensor_data(in[k]);
        a.dt[k] = in[k]->dtype;
        a.l[k] = cu_layout(in[k]);
        a.c[k] = coef[k];
    }
    int64_t ne = tensor_numel(out);
    k_lincomb<<<cu_blocks(ne, 256), 256, 0, cu_stream(out)>>>(tensor_data(out), out->dtype,
                                                             cu_layout(out), a, ne);
    LAUNCH_CHECK();
    return 0;
}

__global__ void k_geglu(void *o, int odt, cu_lay ol, const void *x, int xdt, cu_lay xl, int64_t c,
                        int64_t n)
{
    CU_FOR(i, n)
    {
        int64_t r = i / c, j = i % c;
        /* x viewed as [rows, 2c]: value at column j, gate at column c + j */
        float a = ld(x, xdt, cu_off(xl, r * 2 * c + j));
        float g = ld(x, xdt, cu_off(xl, r * 2 * c + c + j));
        st(o, odt, cu_off(ol, i), a * act(g, TENSOR__GELU, 0, 0));
    }
}

int tensor__cuda_geglu(struct tensor *out, const struct tensor *x, struct err *e)
{
    int64_t n = tensor_numel(out), c = out->shape[out->ndim - 1];
    k_geglu<<<cu_blocks(n, 256), 256, 0, cu_stream(out)>>>(tensor_data(out), out->dtype,
                                                          cu_layout(out), tensor_data(x),
                                                          x->dtype, cu_layout(x), c, n);
    LAUNCH_CHECK();
    return 0;
}

/* ---- block reductions ---------------------------------------------------------------------- */

static __device__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum (or max) over the block; every thread gets the result. blockDim.x = 256. */
static __device__ float block_reduce(float v, int is_max)
{
    __shared__ float sh[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = lane < nw ? sh[lane] : (is_max ? -INFINITY : 0.0f);
    v = is_max ? warp_max(v) : warp_sum(v);
    return v;
}

/* ---- softmax (rows of a contiguous tensor, f32 math) ----------------------------------------- */

__global__ void k_softmax(void *o, int odt, const void *x, int xdt, int64_t c)
{
    int64_t base = (int64_t)blockIdx.x * c;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
        m = fmaxf(m, ld(x, xdt, base + j));
    m = block_reduce(m, 1);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
        s += m == -INFINITY ? 1.0f : expf(ld(x, xdt, base + j) - m);
    s = block_reduce(s, 0);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
        st(o, odt, base + j, m == -INFINITY ? 1.0f / (float)c : expf(ld(x, xdt, base + j) - m) / s);
}

int tensor__cuda_softmax(struct tensor *out, const struct tensor *x, struct err *e)
{
    struct tensor *tx = NULL, *to = NULL;
    const struct tensor *cx, *co;
    int rc;
    if ((rc = cu_contig(x, x->dtype, &tx, &cx, e)) < 0)
        return rc;
    if ((rc = cu_contig(out, out->dtype, &to, &co, e)) < 0)
        goto out;
    {
        int64_t c = x->shape[x->ndim - 1], rows = tensor_numel(x) / c;
        k_softmax<<<(unsigned)rows, 256, 0, cu_stream(out)>>>(tensor_data(co), co->dtype,
                                                              tensor_data(cx), cx->dtype, c);
        LAUNCH_CHECK();
    }
    if (to)
        tensor__cuda_copy(out, to, e);
out:
    tensor_free(tx);
    tensor_free(to);
    return rc;
}

/* ---- norms ------------------------------------------------------------------------------ */

/* One block per (sample, group) over cnt = (C/G)*HW contiguous values; two passes for an
 * accurate variance (mean first, then squared deviations). */
__global__ void k_group_norm(void *o, int odt, const void *x, int xdt, const void *g, int gdt,
                             const void *b, int bdt, int64_t c, int64_t hw, int groups, float eps,
                             int silu)
{
    int64_t ng = blockIdx.x, n = ng / groups, gi = ng % groups;
    int64_t cg = c / groups, cnt = cg * hw;
    int64_t base = (n * c + gi * cg) * hw;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < cnt; j += blockDim.x)
        s += ld(x, xdt, base + j);
    float mean = block_reduce(s, 0) / (float)cnt;
    float q = 0.0f;
    for (int64_t j = threadIdx.x; j < cnt; j += blockDim.x) {
        float d = ld(x, xdt, base + j) - mean;
        q += d * d;
    }
    float rstd = rsqrtf(block_reduce(q, 0) / (float)cnt + eps);
    for (int64_t j = threadIdx.x; j < cnt; j += blockDim.x) {
        int64_t ch = gi * cg + j / hw;
        float ga = g ? ld(g, gdt, ch) : 1.0f, be = b ? ld(b, bdt, ch) : 0.0f;
        float y = (ld(x, xdt, base + j) - mean) * rstd * ga + be;
        if (silu)
            y = y / (1.0f + expf(-y));
        st(o, odt, base + j, y);
    }
}

int tensor__cuda_group_norm(struct tensor *out, const struct tensor *x, int groups,
                            const struct tensor *gamma, const struct tensor *beta, float eps,
                            int fuse_silu, struct err *e)
{
    struct tensor *tx = NULL, *to = NULL, *tg = NULL, *tb = NULL;
    const struct tensor *cx, *co, *cg, *cb;
    int rc;
    if ((rc = cu_contig(x, x->dtype, &tx, &cx, e)) < 0 ||
        (rc = cu_contig(out, out->dtype, &to, &co, e)) < 0 ||
        (rc = cu_contig(gamma, gamma ? gamma->dtype : TENSOR_F32, &tg, &cg, e)) < 0 ||
        (rc = cu_contig(beta, beta ? beta->dtype : TENSOR_F32, &tb, &cb, e)) < 0)
        goto out;
    {
        int64_t n = x->shape[0], c = x->shape[1], hw = tensor_numel(x) / (n * c);
        k_group_norm<<<(unsigned)(n * groups), 256, 0, cu_stream(out)>>>(
            tensor_data(co), co->dtype, tensor_data(cx), cx->dtype, cg ? tensor_data(cg) : NULL,
            cg ? cg->dtype : 0, cb ? tensor_data(cb) : NULL, cb ? cb->dtype : 0, c, hw, groups, eps,
            fuse_silu);
        LAUNCH_CHECK();
    }
    if (to)
        tensor__cuda_copy(out, to, e);
out:
    tensor_free(tx);
    tensor_free(to);
    tensor_free(tg);
    tensor_free(tb);
    return rc;
}

__global__ void k_layer_norm(void *o, int odt, const void *x, int xdt, const void *g, int gdt,
                             const void *b, int bdt, int64_t c, float eps)
{
    int64_t base = (int64_t)blockIdx.x * c;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
        s += ld(x, xdt, base + j);
    float mean = block_reduce(s, 0) / (float)c;
    float q = 0.0f;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
        float d = ld(x, xdt, base + j) - mean;
        q += d * d;
    }
    float rstd = rsqrtf(block_reduce(q, 0) / (float)c + eps);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
        float y = (ld(x, xdt, base + j) - mean) * rstd;
        y = y * (g ? ld(g, gdt, j) : 1.0f) + (b ? ld(b, bdt, j) : 0.0f);
        st(o, odt, base + j, y);
    }
}

int tensor__cuda_layer_norm(struct tensor *out, const struct tensor *x,
                            const struct tensor *gamma, const struct tensor *beta, float eps,
                            struct err *e)
{
    struct tensor *tx = NULL, *to = NULL, *tg = NULL, *tb = NULL;
    const struct tensor *cx, *co, *cg, *cb;
    int rc;
    if ((rc = cu_contig(x, x->dtype, &tx, &cx, e)) < 0 ||
        (rc = cu_contig(out, out->dtype, &to, &co, e)) < 0 ||
        (rc = cu_contig(gamma, gamma ? gamma->dtype : TENSOR_F32, &tg, &cg, e)) < 0 ||
        (rc = cu_contig(beta, beta ? beta->dtype : TENSOR_F32, &tb, &cb, e)) < 0)
        goto out;
    {
        int64_t c = x->shape[x->ndim - 1], rows = tensor_numel(x) / c;
        k_layer_norm<<<(unsigned)rows, 256, 0, cu_stream(out)>>>(
            tensor_data(co), co->dtype, tensor_data(cx), cx->dtype, cg ? tensor_data(cg) : NULL,
            cg ? cg->dtype : 0, cb ? tensor_data(cb) : NULL, cb ? cb->dtype : 0, c, eps);
        LAUNCH_CHECK();
    }
    if (to)
        tensor__cuda_copy(out, to, e);
out:
    tensor_free(tx);
    tensor_free(to);
    tensor_free(tg);
    tensor_free(tb);
    return rc;
}

/* ---- resampling and embeddings ---------------------------------------------------------------- */

__global__ void k_upsample(void *o, int odt, cu_lay ol, const void *x, int xdt, cu_lay xl,
                           int64_t h, int64_t w, int64_t ho, int64_t wo, int64_t n)
{
    float sy = (float)h / (float)ho, sx = (float)w / (float)wo;
    CU_FOR(i, n)
    {
        int64_t ox = i % wo, oy = i / wo % ho, p = i / (wo * ho);
        int64_t iy = (int64_t)floorf((float)oy * sy), ix = (int64_t)floorf((float)ox * sx);
        iy = iy < h - 1 ? iy : h - 1;
        ix = ix < w - 1 ? ix : w - 1;
        st(o, odt, cu_off(ol, i), ld(x, xdt, cu_off(xl, (p * h + iy) * w + ix)));
    }
}

int tensor__cuda_upsample(struct tensor *out, const struct tensor *x, struct err *e)
{
    int64_t n = tensor_numel(out);
    k_upsample<<<cu_blocks(n, 256), 256, 0, cu_stream(out)>>>(
        tensor_data(out), out->dtype, cu_layout(out), tensor_data(x), x->dtype, cu_layout(x),
        x->shape[2], x->shape[3], out->shape[2], out->shape[3], n);
    LAUNCH_CHECK();
    return 0;
}

__global__ void k_prelu(void *o, int odt, cu_lay ol, const void *x, int xdt, cu_lay xl,
                        const void *s, int sdt, cu_lay sl, int64_t c, int64_t plane, int64_t n)
{
    CU_FOR(i, n)
    {
        float v = ld(x, xdt, cu_off(xl, i)), a = ld(s, sdt, cu_off(sl, i / plane % c));
        st(o, odt, cu_off(ol, i), v >= 0.0f ? v : v * a);
    }
}

int tensor__cuda_prelu(struct tensor *out, const struct tensor *x, const struct tensor *slope,
                       struct err *e)
{
    int64_t n = tensor_numel(out), c = x->shape[1], plane = n / (x->shape[0] * c);
    k_prelu<<<cu_blocks(n, 256), 256, 0, cu_stream(out)>>>(
        tensor_data(out), out->dtype, cu_layout(out), tensor_data(x), x->dtype, cu_layout(x),
        tensor_data(slope), slope->dtype, cu_layout(slope), c, plane, n);
    LAUNCH_CHECK();
    return 0;
}

/* As the CPU's tensor__cpu_pixel_shuffle: one thread per element of the r x r side
 * (`big`), which unshuffle reads reflected past x's real extent (hr, wr). */
__global__ void k_pixel_shuffle(void *o, int odt, cu_lay ol, const void *x, int xdt, cu_lay xl,
                                int64_t c, int64_t hb, int64_t wb, int64_t hr, int64_t wr, int r,
                                int inverse, int64_t n)
{
    CU_FOR(k, n)
    {
        int64_t xx = k % wb, y = k / wb % hb, ch = k / (wb * hb) % c, b = k / (wb * hb * c);
        int64_t hs = hb / r, ws = wb / r, cs = c * r * r;
        int64_t sc = ch * r * r + (y % r) * r + xx % r;
        int64_t si = ((b * cs + sc) * hs + y / r) * ws + xx / r;
        if (inverse) {
            int64_t yy = y < hr ? y : 2 * hr - 2 - y, xr = xx < wr ? xx : 2 * wr - 2 - xx;
            yy = yy < 0 ? 0 : yy;
            xr = xr < 0 ? 0 : xr;
            st(o, odt, cu_off(ol, si), ld(x, xdt, cu_off(xl, ((b * c + ch) * hr + yy) * wr + xr)));
        } else {
            st(o, odt, cu_off(ol, k), ld(x, xdt, cu_off(xl, si)));
        }
    }
}

int tensor__cuda_pixel_shuffle(struct tensor *out, const struct tensor *x, int r, int inverse,
                               struct err *e)
{
    const struct tensor *small = inverse ? out : x;
    int64_t c = small->shape[1] / ((int64_t)r * r), hb = small->shape[2] * r, wb = small->shape[3] * r;
    int64_t hr = inverse ? x->shape[2] : hb, wr = inverse ? x->shape[3] : wb;
    int64_t n = x->shape[0] * c * hb * wb;
    k_pixel_shuffle<<<cu_blocks(n, 256), 256, 0, cu_stream(out)>>>(
        tensor_data(out), out->dtype, cu_layout(out), tensor_data(x), x->dtype, cu_layout(x), c,
        hb, wb, hr, wr, r, inverse, n);
    LAUNCH_CHECK();
    return 0;
}

__global__ void k_embedding(void *o, int odt, cu_lay ol, const void *t, int tdt,
                            const int32_t *ids, int64_t dim, int64_t n)
{
    CU_FOR(i, n) st(o, odt, cu_off(ol, i), ld(t, tdt, (int64_t)ids[i / dim] * dim + i % dim));
}

int tensor__cuda_embedding(struct tensor *out, const struct tensor *table, const int32_t *ids,
                           int64_t n, struct err *e)
{
    struct dev *d = tensor_dev(out);
    void *dids = NULL;
    int rc;
    if ((rc = dev_alloc(d, (size_t)n * sizeof(int32_t), &dids)) < 0)
        return err_set(e, rc, "embedding: cannot allocate %lld ids on the device", (long long)n);
    /* dev_copy is synchronous with respect to the host, so ids may be freed by the caller
     * as soon as we return. */
    if ((rc = dev_copy(d, DEV_COPY_H2D, dids, ids, (size_t)n * sizeof(int32_t))) < 0) {
        dev_free(d, dids);
        return err_set(e, rc, "embedding: cannot upload ids");
    }
    int64_t dim = table->shape[1], ne = n * dim;
    k_embedding<<<cu_blocks(ne, 256), 256, 0, cu_stream(out)>>>(
        tensor_data(out), out->dtype, cu_layout(out), tensor_data(table), table->dtype,
        (const int32_t *)dids, dim, ne);
    LAUNCH_CHECK();
    /* The kernel must finish reading ids before the block can be reused. */
    CUDA_CHECK(cudaStreamSynchronize(cu_stream(out)));
    dev_free(d, dids);
    return 0;
}
