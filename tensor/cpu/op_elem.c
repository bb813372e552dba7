/*
 * op_elem.c — the CPU backend's elementwise, lincomb, upsample, embedding and fill.
 */
#include "adapt.h"
#include "cpu_backend.h"

struct bin_job {
    float *o;
    const float *a, *b;
    int64_t sh[4], sa[4], sb[4];
    int mul;
};

static void bin_task(void *ctx, int64_t beg, int64_t end, int tid)
{
    struct bin_job *j = ctx;
    int64_t n3 = j->sh[3];
    for (int64_t r = beg; r < end; r++) {
        int64_t i2 = r % j->sh[2], i1 = r / j->sh[2] % j->sh[1], i0 = r / (j->sh[2] * j->sh[1]);
        const float *a = j->a + i0 * j->sa[0] + i1 * j->sa[1] + i2 * j->sa[2];
        const float *b = j->b + i0 * j->sb[0] + i1 * j->sb[1] + i2 * j->sb[2];
        float *o = j->o + r * n3;
        int64_t a3 = j->sa[3], b3 = j->sb[3];
        if (j->mul) {
            if (a3 && b3)
                for (int64_t i = 0; i < n3; i++) o[i] = a[i] * b[i];
            else
                for (int64_t i = 0; i < n3; i++) o[i] = a[i * a3] * b[i * b3];
        } else {
            if (a3 && b3)
                for (int64_t i = 0; i < n3; i++) o[i] = a[i] + b[i];
            else if (a3)
                for (int64_t i = 0; i < n3; i++) o[i] = a[i] + b[0];
            else
                for (int64_t i = 0; i < n3; i++) o[i] = a[i * a3] + b[i * b3];
        }
    }
}

int tensor__cpu_binary(struct tensor *out, const struct tensor *a, const struct tensor *b,
                       const struct tensor__bcast *bc, int mul, struct err *e)
{
    const int64_t *osh = bc->shape, *sa = bc->stride_a, *sb = bc->stride_b;
    double pt0 = tensor__prof_t0();
    struct hbuf ha, hb, ho;
    const float *pa = hin(a, &ha), *pb = hin(b, &hb);
    float *po = hout(out, &ho);
    struct bin_job j = {po, pa, pb, {osh[0], osh[1], osh[2], osh[3]},
                        {sa[0], sa[1], sa[2], sa[3]}, {sb[0], sb[1], sb[2], sb[3]}, mul};
    int64_t rows = osh[0] * osh[1] * osh[2];
    if (tensor_numel(out) < 16384)
        bin_task(&j, 0, rows, 0);
    else
        tensor__pool_for(rows, bin_task, &j);
    hfree(&ha);
    hfree(&hb);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_BIN, pt0, 0);
    return 0;
}

int tensor__cpu_lincomb(struct tensor *out, int n, const float *coef,
                        const struct tensor *const *in, struct err *e)
{
    struct hbuf h[8], ho;
    const float *p[8];
    for (int i = 0; i < n; i++)
        p[i] = hin(in[i], &h[i]);
    float *po = hout(out, &ho);
    cpu_lincomb(po, n, coef, p, tensor_numel(out));
    for (int i = 0; i < n; i++)
        hfree(&h[i]);
    hout_done(out, &ho);
    return 0;
}

struct up_job {
    float *po;
    const float *px;
    const int64_t *sy, *sx;
    int64_t h, w, ho, wo;
};

/* Output rows [b, e) (plane * ho + y) of the nearest upsample. */
static void up_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const struct up_job *j = ctx;
    int twice = j->wo == 2 * j->w; /* the UNet's and VAE's 2x: column i reads i / 2 */
    for (int64_t r = b; r < e; r++) {
        int64_t p = r / j->ho, y = r % j->ho;
        const float *src = j->px + (p * j->h + j->sy[y]) * j->w;
        float *dst = j->po + r * j->wo;
        if (twice) {
            for (int64_t i = 0; i < j->w; i++)
                dst[2 * i] = dst[2 * i + 1] = src[i];
        } else {
            for (int64_t i = 0; i < j->wo; i++)
                dst[i] = src[j->sx[i]];
        }
    }
}

/*
 * Over the pool by output rows: the output is the largest fresh block of a VAE decode
 * (268 MB at 512^2), and on a single thread its first-touch page faults alone took
 * ~0.8 CPU-s of a cold 512^2 bf16 run (perf: clear_page under this op).
 */
int tensor__cpu_upsample(struct tensor *out, const struct tensor *x, struct err *e)
{
    double pt0 = tensor__prof_t0();
    int64_t planes = x->shape[0] * x->shape[1];
    int64_t h = x->shape[2], w = x->shape[3], ho = out->shape[2], wo = out->shape[3];
    int64_t *sy = xmalloc((size_t)ho * sizeof(int64_t)), *sx = xmalloc((size_t)wo * sizeof(int64_t));
    tensor__nearest_map(sy, h, ho);
    tensor__nearest_map(sx, w, wo);
    struct hbuf hx, hO;
    struct up_job j = {NULL, hin(x, &hx), sy, sx, h, w, ho, wo};
    j.po = hout(out, &hO);
    tensor__pool_for(planes * ho, up_task, &j);
    xfree(sy);
    xfree(sx);
    hfree(&hx);
    hout_done(out, &hO);
    tensor__prof_end(TENSOR__PROF_UPSAMPLE, pt0, 0);
    return 0;
}

/* Row/column i of an axis of n reflect-padded at its end (F.pad "reflect"): n + k reads
 * n - 2 - k, clamped to 0 for axes too short to mirror. */
static int64_t reflect_end(int64_t i, int64_t n)
{
    if (i < n)
        return i;
    i = 2 * n - 2 - i;
    return i < 0 ? 0 : i;
}

/*
 * Both directions walk the r x r side (`big`, [N, C, Hb, Wb]) and address the channel
 * side (`small`, [N, C*r*r, Hs, Ws]): channel c*r*r + i*r + j, pixel (y/r, x/r) holds big
 * pixel (y, x) with i = y % r, j = x % r. Unshuffle reads big past its end reflected.
 */
int tensor__cpu_pixel_shuffle(struct tensor *out, const struct tensor *x, int r, int inverse,
                              struct err *e)
{
    double pt0 = tensor__prof_t0();
    struct hbuf hx, hO;
    const float *px = hin(x, &hx);
    float *po = hout(out, &hO);
    const struct tensor *small = inverse ? out : x;
    int64_t n = x->shape[0], cs = small->shape[1], hs = small->shape[2], ws = small->shape[3];
    int64_t c = cs / ((int64_t)r * r), hb = hs * r, wb = ws * r;
    /* The real extent of the big side: out's when shuffling, x's (unpadded) otherwise. */
    int64_t hr = inverse ? x->shape[2] : hb, wr = inverse ? x->shape[3] : wb;
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t y = 0; y < hb; y++) {
                int64_t i = y % r, sy = y / r, yy = reflect_end(y, hr);
                for (int64_t xx = 0; xx < wb; xx++) {
                    int64_t j = xx % r, sc = ch * r * r + i * r + j;
                    int64_t si = ((b * cs + sc) * hs + sy) * ws + xx / r;
                    if (inverse)
                        po[si] = px[((b * c + ch) * hr + yy) * wr + reflect_end(xx, wr)];
                    else
                        po[((b * c + ch) * hb + y) * wb + xx] = px[si];
                }
            }
    hfree(&hx);
    hout_done(out, &hO);
    tensor__prof_end(TENSOR__PROF_COPY, pt0, 0);
    return 0;
}

int tensor__cpu_embedding(struct tensor *out, const struct tensor *table, const int32_t *ids,
                          int64_t n, struct err *e)
{
    int64_t dim = table->shape[1];
    size_t es = tensor_dtype_size(table->dtype);
    struct hbuf ho;
    float *po = hout(out, &ho);
    /* Convert only the rows used: the CLIP table is 49408 x 768, often f16. */
    for (int64_t i = 0; i < n; i++)
        tensor_convert_host(po + i * dim, TENSOR_F32,
                            tensor__ptr(table) + (size_t)ids[i] * (size_t)dim * es, table->dtype,
                            (size_t)dim);
    hout_done(out, &ho);
    return 0;
}

int tensor__cpu_fill(struct tensor *t, float value, struct err *e)
{
    struct hbuf h;
    float *p = hout(t, &h);
    int64_t n = tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        p[i] = value;
    hout_done(t, &h);
    return 0;
}
