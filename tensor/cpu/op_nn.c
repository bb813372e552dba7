/*
 * op_nn.c — the CPU backend's norms and activations (adapters to norm.c and vec.c).
 */
#include "adapt.h"
#include "cpu_backend.h"

int tensor__cpu_group_norm(struct tensor *out, const struct tensor *x, int groups,
                           const struct tensor *gamma, const struct tensor *beta, float eps,
                           int fuse_silu, struct err *e)
{
    double pt0 = tensor__prof_t0();
    int64_t n = x->shape[0], c = x->shape[1], hw = tensor_numel(x) / (n * c);
    struct hbuf hx, hg, hb, ho;
    const float *px = hin(x, &hx), *pg = hin(gamma, &hg), *pb = hin(beta, &hb);
    float *po = hout(out, &ho);
    cpu_group_norm(po, px, n, c, hw, groups, pg, pb, eps, fuse_silu);
    hfree(&hx);
    hfree(&hg);
    hfree(&hb);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_GN, pt0, 0);
    return 0;
}

int tensor__cpu_layer_norm(struct tensor *out, const struct tensor *x,
                           const struct tensor *gamma, const struct tensor *beta, float eps,
                           struct err *e)
{
    double pt0 = tensor__prof_t0();
    struct hbuf hx, hg, hb, ho;
    const float *px = hin(x, &hx), *pg = hin(gamma, &hg), *pb = hin(beta, &hb);
    float *po = hout(out, &ho);
    cpu_layer_norm(po, px, cpu_rows_of(x), x->shape[x->ndim - 1], pg, pb, eps);
    hfree(&hx);
    hfree(&hg);
    hfree(&hb);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_LN, pt0, 0);
    return 0;
}

int tensor__cpu_unary(struct tensor *out, const struct tensor *x, enum tensor__unary kind,
                      float p0, float p1, struct err *e)
{
    double pt0 = tensor__prof_t0();
    struct hbuf hx, ho;
    const float *px = hin(x, &hx);
    float *po = hout(out, &ho);
    int64_t n = tensor_numel(x);
    switch (kind) {
    case TENSOR__SILU: cpu_activation(po, px, n, CPU_ACT_SILU); break;
    case TENSOR__GELU: cpu_activation(po, px, n, CPU_ACT_GELU); break;
    case TENSOR__QUICK_GELU: cpu_activation(po, px, n, CPU_ACT_QUICK_GELU); break;
    case TENSOR__SCALE: cpu_vec_scale(po, px, p0, n); break;
    case TENSOR__CLAMP:
        for (int64_t i = 0; i < n; i++)
            po[i] = px[i] < p0 ? p0 : px[i] > p1 ? p1 : px[i];
        break;
    case TENSOR__LEAKY_RELU:
        for (int64_t i = 0; i < n; i++)
            po[i] = px[i] >= 0.0f ? px[i] : px[i] * p0;
        break;
    }
    hfree(&hx);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_ACT, pt0, 0);
    return 0;
}

int tensor__cpu_prelu(struct tensor *out, const struct tensor *x, const struct tensor *slope,
                      struct err *e)
{
    double pt0 = tensor__prof_t0();
    struct hbuf hx, hs, ho;
    const float *px = hin(x, &hx), *ps = hin(slope, &hs);
    float *po = hout(out, &ho);
    int64_t n = x->shape[0], c = x->shape[1], plane = tensor_numel(x) / (n * c);
    for (int64_t i = 0; i < n * c; i++) {
        float a = ps[i % c];
        const float *src = px + i * plane;
        float *dst = po + i * plane;
        for (int64_t k = 0; k < plane; k++)
            dst[k] = src[k] >= 0.0f ? src[k] : src[k] * a;
    }
    hfree(&hx);
    hfree(&hs);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_ACT, pt0, 0);
    return 0;
}

int tensor__cpu_geglu(struct tensor *out, const struct tensor *x, struct err *e)
{
    double pt0 = tensor__prof_t0();
    struct hbuf hx, ho;
    const float *px = hin(x, &hx);
    float *po = hout(out, &ho);
    cpu_geglu(po, px, cpu_rows_of(x), x->shape[x->ndim - 1] / 2);
    hfree(&hx);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_ACT, pt0, 0);
    return 0;
}

int tensor__cpu_softmax(struct tensor *out, const struct tensor *x, struct err *e)
{
    struct hbuf hx, ho;
    const float *px = hin(x, &hx);
    float *po = hout(out, &ho);
    cpu_softmax(po, px, cpu_rows_of(x), x->shape[x->ndim - 1]);
    hfree(&hx);
    hout_done(out, &ho);
    return 0;
}
