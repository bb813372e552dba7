/*
 * resample — common_upscale and PIL's resize (see resample.h). Every float method
 * works on one strided plane at a time (bislerp on strided channel vectors), so the
 * planar and the channels-last layouts share the kernels: a plane is a base pointer,
 * a pixel stride and a row stride.
 */
#include "resample.h"

#include <math.h>
#include <string.h>

#include "alloc.h"
#include "pynum.h"

/* One channel of one sample: element (y, x) is p[y * ys + x * xs]. */
struct plane_in {
    const float *p;
    int64_t xs, ys;
};
struct plane_out {
    float *p;
    int64_t xs, ys;
};

#define AT(pl, y, x) ((pl).p[(y) * (pl).ys + (x) * (pl).xs])

typedef void (*plane_fn)(struct plane_in s, int64_t h, int64_t w, struct plane_out d, int64_t oh,
                         int64_t ow);

static void plane_nearest_exact(struct plane_in s, int64_t h, int64_t w, struct plane_out d,
                                int64_t oh, int64_t ow)
{
    /* PyTorch: min(floorf((dst + 0.5f) * scale), in - 1), scale = (float)in / out. */
    float sh = (float)h / (float)oh, sw = (float)w / (float)ow;
    for (int64_t y = 0; y < oh; y++) {
        int64_t iy = (int64_t)floorf(((float)y + 0.5f) * sh);
        if (iy > h - 1)
            iy = h - 1;
        for (int64_t x = 0; x < ow; x++) {
            int64_t ix = (int64_t)floorf(((float)x + 0.5f) * sw);
            if (ix > w - 1)
                ix = w - 1;
            AT(d, y, x) = AT(s, iy, ix);
        }
    }
}

/* Source indices and weights of bilinear (align_corners = False) along one axis. */
static void lin_src(int64_t o, int64_t in, int64_t out, int64_t *i0, int64_t *i1, float *l0,
                    float *l1)
{
    float scale = (float)in / (float)out;
    float f = scale * ((float)o + 0.5f) - 0.5f;
    if (f < 0.0f)
        f = 0.0f;
    *i0 = (int64_t)f;
    *i1 = *i0 < in - 1 ? *i0 + 1 : *i0;
    *l1 = f - (float)*i0;
    *l0 = 1.0f - *l1;
}

static void plane_bilinear(struct plane_in s, int64_t h, int64_t w, struct plane_out d, int64_t oh,
                           int64_t ow)
{
    for (int64_t y = 0; y < oh; y++) {
        int64_t y0, y1;
        float ly0, ly1;
        lin_src(y, h, oh, &y0, &y1, &ly0, &ly1);
        for (int64_t x = 0; x < ow; x++) {
            int64_t x0, x1;
            float lx0, lx1;
            lin_src(x, w, ow, &x0, &x1, &lx0, &lx1);
            float top = lx0 * AT(s, y0, x0) + lx1 * AT(s, y0, x1);
            float bot = lx0 * AT(s, y1, x0) + lx1 * AT(s, y1, x1);
            AT(d, y, x) = ly0 * top + ly1 * bot;
        }
    }
}

static void plane_area(struct plane_in s, int64_t h, int64_t w, struct plane_out d, int64_t oh,
                       int64_t ow)
{
    /* adaptive_avg_pool2d: [floor(i * in / out), ceil((i + 1) * in / out)) */
    for (int64_t y = 0; y < oh; y++) {
        int64_t ys = (y * h) / oh, ye = ((y + 1) * h + oh - 1) / oh;
        for (int64_t x = 0; x < ow; x++) {
            int64_t xs = (x * w) / ow, xe = ((x + 1) * w + ow - 1) / ow;
            float sum = 0.0f;
            for (int64_t iy = ys; iy < ye; iy++)
                for (int64_t ix = xs; ix < xe; ix++)
                    sum += AT(s, iy, ix);
            AT(d, y, x) = sum / (float)((ye - ys) * (xe - xs));
        }
    }
}

static void cubic_coeffs(float t, float c[4])
{
    const float A = -0.75f;
    float x1 = t + 1.0f, x2 = 1.0f - t, x3 = 2.0f - t;
    c[0] = ((A * x1 - 5.0f * A) * x1 + 8.0f * A) * x1 - 4.0f * A;
    c[1] = ((A + 2.0f) * t - (A + 3.0f)) * t * t + 1.0f;
    c[2] = ((A + 2.0f) * x2 - (A + 3.0f)) * x2 * x2 + 1.0f;
    c[3] = ((A * x3 - 5.0f * A) * x3 + 8.0f * A) * x3 - 4.0f * A;
}

static int64_t clampi(int64_t v, int64_t hi)
{
    return v < 0 ? 0 : v > hi ? hi : v;
}

static void plane_bicubic(struct plane_in s, int64_t h, int64_t w, struct plane_out d, int64_t oh,
                          int64_t ow)
{
    float sh = (float)h / (float)oh, sw = (float)w / (float)ow;
    for (int64_t y = 0; y < oh; y++) {
        float ry = sh * ((float)y + 0.5f) - 0.5f; /* cubic: no clamp at 0 */
        int64_t iy = (int64_t)floorf(ry);
        float cy[4];
        cubic_coeffs(ry - (float)iy, cy);
        for (int64_t x = 0; x < ow; x++) {
            float rx = sw * ((float)x + 0.5f) - 0.5f;
            int64_t ix = (int64_t)floorf(rx);
            float cx[4], rows[4];
            cubic_coeffs(rx - (float)ix, cx);
            int64_t xi[4] = {clampi(ix - 1, w - 1), clampi(ix, w - 1), clampi(ix + 1, w - 1),
                             clampi(ix + 2, w - 1)};
            for (int k = 0; k < 4; k++) {
                int64_t yk = clampi(iy - 1 + k, h - 1);
                rows[k] = AT(s, yk, xi[0]) * cx[0] + AT(s, yk, xi[1]) * cx[1] +
                          AT(s, yk, xi[2]) * cx[2] + AT(s, yk, xi[3]) * cx[3];
            }
            AT(d, y, x) = rows[0] * cy[0] + rows[1] * cy[1] + rows[2] * cy[2] + rows[3] * cy[3];
        }
    }
}

/* ---- PIL's ImagingResample on 8-bit data ----------------------------------------- */

/* libImaging/Resample.c: 32 bits minus 8 for the pixel and 2 for the sign and overflow. */
#define PIL_PRECISION_BITS (32 - 8 - 2)

static double pil_sinc(double x)
{
    if (x == 0.0)
        return 1.0;
    x *= M_PI;
    return sin(x) / x;
}

static double pil_filter(enum resample_pil_filter f, double x)
{
    if (f == RESAMPLE_PIL_LANCZOS)
        return (-3.0 <= x && x < 3.0) ? pil_sinc(x) * pil_sinc(x / 3.0) : 0.0;
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* One axis of PIL's precompute_coeffs + normalize_coeffs_8bpc: per output position
 * the first source index, the tap count and ksize fixed-point weights. */
struct pil_taps {
    int64_t *bounds; /* [out * 2]: xmin, count */
    int32_t *k;      /* [out * ksize] */
    int64_t ksize;
};

static void pil_taps_make(struct pil_taps *t, int64_t in, int64_t out, enum resample_pil_filter f)
{
    double scale = (double)in / (double)out, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = (f == RESAMPLE_PIL_LANCZOS ? 3.0 : 1.0) * filterscale;
    t->ksize = (int64_t)ceil(support) * 2 + 1;
    t->bounds = xcalloc((size_t)out * 2, sizeof *t->bounds);
    t->k = xcalloc((size_t)(out * t->ksize), sizeof *t->k);
    double *kk = xcalloc((size_t)t->ksize, sizeof *kk);
    for (int64_t xx = 0; xx < out; xx++) {
        double center = ((double)xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int64_t xmin = (int64_t)(center - support + 0.5), xmax = (int64_t)(center + support + 0.5);
        if (xmin < 0)
            xmin = 0;
        if (xmax > in)
            xmax = in;
        xmax -= xmin;
        for (int64_t x = 0; x < xmax; x++) {
            kk[x] = pil_filter(f, ((double)(x + xmin) - center + 0.5) * ss);
            ww += kk[x];
        }
        for (int64_t x = 0; x < xmax; x++) {
            double v = ww != 0.0 ? kk[x] / ww : kk[x];
            t->k[xx * t->ksize + x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PIL_PRECISION_BITS)
                                                      : 0.5 + v * (1 << PIL_PRECISION_BITS));
        }
        t->bounds[xx * 2] = xmin;
        t->bounds[xx * 2 + 1] = xmax;
    }
    xfree(kk);
}

static void pil_taps_release(struct pil_taps *t)
{
    xfree(t->bounds);
    xfree(t->k);
}

static uint8_t pil_clip8(int64_t in)
{
    if (in >= ((int64_t)1 << PIL_PRECISION_BITS << 8))
        return 255;
    if (in <= 0)
        return 0;
    return (uint8_t)(in >> PIL_PRECISION_BITS);
}

/* dst[i * dstride] for i < out from src[j * stride], PIL's rounding included. */
static void pil_pass(const uint8_t *src, int64_t stride, const struct pil_taps *t, int64_t out,
                     uint8_t *dst, int64_t dstride)
{
    for (int64_t i = 0; i < out; i++) {
        int64_t xmin = t->bounds[i * 2], n = t->bounds[i * 2 + 1];
        const int32_t *k = t->k + i * t->ksize;
        int64_t ss = (int64_t)1 << (PIL_PRECISION_BITS - 1);
        for (int64_t x = 0; x < n; x++)
            ss += (int64_t)src[(xmin + x) * stride] * k[x];
        dst[i * dstride] = pil_clip8(ss);
    }
}

void resample_pil8(const uint8_t *src, int iw, int ih, int c, uint8_t *dst, int ow, int oh,
                   enum resample_pil_filter filter)
{
    /* Horizontal pass first, as ImagingResampleInner; each skipped when its size stays. */
    uint8_t *tmp = xmalloc((size_t)ow * ih * c);
    if (ow == iw) {
        memcpy(tmp, src, (size_t)iw * ih * c);
    } else {
        struct pil_taps t;
        pil_taps_make(&t, iw, ow, filter);
        for (int y = 0; y < ih; y++)
            for (int ch = 0; ch < c; ch++)
                pil_pass(src + (size_t)y * iw * c + ch, c, &t, ow, tmp + (size_t)y * ow * c + ch, c);
        pil_taps_release(&t);
    }
    if (oh == ih) {
        memcpy(dst, tmp, (size_t)ow * oh * c);
    } else {
        struct pil_taps t;
        pil_taps_make(&t, ih, oh, filter);
        for (int x = 0; x < ow * c; x++)
            pil_pass(tmp + x, (int64_t)ow * c, &t, oh, dst + x, (int64_t)ow * c);
        pil_taps_release(&t);
    }
    xfree(tmp);
}

static void plane_lanczos(struct plane_in s, int64_t h, int64_t w, struct plane_out d, int64_t oh,
                          int64_t ow)
{
    /* comfy.utils.lanczos: np.clip(255. * x, 0, 255).astype(np.uint8) in float32. */
    uint8_t *a = xmalloc((size_t)(h * w)), *b = xmalloc((size_t)(oh * ow));
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) {
            float v = 255.0f * AT(s, y, x);
            a[y * w + x] = (uint8_t)(v > 0.0f ? (v < 255.0f ? v : 255.0f) : 0.0f);
        }
    resample_pil8(a, (int)w, (int)h, 1, b, (int)ow, (int)oh, RESAMPLE_PIL_LANCZOS);
    for (int64_t y = 0; y < oh; y++)
        for (int64_t x = 0; x < ow; x++)
            AT(d, y, x) = (float)b[y * ow + x] / 255.0f;
    xfree(a);
    xfree(b);
}

/* ---- bislerp ------------------------------------------------------------------------ */

/*
 * bislerp's sample positions along one axis: bilinear resampling of
 * [0, 1, .., L-1] gives the first index and the ratio, of [1, 2, .., L-1, L-1]
 * the second index (ComfyUI generate_bilinear_data).
 */
static void slerp_axis(int64_t in, int64_t out, int64_t *c1, int64_t *c2, float *ratio)
{
    for (int64_t o = 0; o < out; o++) {
        int64_t i0, i1;
        float l0, l1;
        lin_src(o, in, out, &i0, &i1, &l0, &l1);
        float v1 = l0 * (float)i0 + l1 * (float)i1;
        float a0 = i0 + 1 < in ? (float)(i0 + 1) : (float)(in - 1);
        float a1 = i1 + 1 < in ? (float)(i1 + 1) : (float)(in - 1);
        float v2 = l0 * a0 + l1 * a1;
        ratio[o] = v1 - floorf(v1);
        c1[o] = (int64_t)v1;
        c2[o] = (int64_t)v2;
    }
}

/*
 * slerp of two channel vectors (channel stride cs) by r into out (channel
 * stride os), as ComfyUI's bislerp: unit vectors slerped, the norm lerped;
 * nearly equal directions copy b1, opposite ones fall back to a lerp.
 */
static void slerp_vec(const float *b1, const float *b2, int64_t c, int64_t cs, float r,
                      float *out, int64_t os)
{
    float n1 = 0.0f, n2 = 0.0f;
    for (int64_t k = 0; k < c; k++) {
        n1 += b1[k * cs] * b1[k * cs];
        n2 += b2[k * cs] * b2[k * cs];
    }
    n1 = sqrtf(n1);
    n2 = sqrtf(n2);
    float dot = 0.0f;
    for (int64_t k = 0; k < c; k++) {
        float u1 = n1 == 0.0f ? 0.0f : b1[k * cs] / n1;
        float u2 = n2 == 0.0f ? 0.0f : b2[k * cs] / n2;
        dot += u1 * u2;
    }
    if (dot > 1.0f - 1e-5f) {
        for (int64_t k = 0; k < c; k++)
            out[k * os] = b1[k * cs];
        return;
    }
    if (dot < 1e-5f - 1.0f) {
        for (int64_t k = 0; k < c; k++)
            out[k * os] = b1[k * cs] * (1.0f - r) + b2[k * cs] * r;
        return;
    }
    float omega = acosf(dot), so = sinf(omega);
    float w1 = sinf((1.0f - r) * omega) / so, w2 = sinf(r * omega) / so;
    float norm = n1 * (1.0f - r) + n2 * r;
    for (int64_t k = 0; k < c; k++) {
        float u1 = n1 == 0.0f ? 0.0f : b1[k * cs] / n1;
        float u2 = n2 == 0.0f ? 0.0f : b2[k * cs] / n2;
        out[k * os] = (w1 * u1 + w2 * u2) * norm;
    }
}

/* bislerp of one sample: s/d give channel 0's plane, cs/dcs the channel strides. */
static void sample_bislerp(struct plane_in s, int64_t cs, int64_t c, int64_t h, int64_t w,
                           struct plane_out d, int64_t dcs, int64_t oh, int64_t ow)
{
    float *mid = xmalloc((size_t)(c * h * ow) * sizeof *mid); /* planar [c, h, ow] */
    int64_t n = ow > oh ? ow : oh;
    int64_t *c1 = xmalloc((size_t)n * sizeof *c1), *c2 = xmalloc((size_t)n * sizeof *c2);
    float *r = xmalloc((size_t)n * sizeof *r);
    slerp_axis(w, ow, c1, c2, r);
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < ow; x++)
            slerp_vec(&AT(s, y, c1[x]), &AT(s, y, c2[x]), c, cs, r[x], mid + y * ow + x, h * ow);
    slerp_axis(h, oh, c1, c2, r);
    for (int64_t y = 0; y < oh; y++)
        for (int64_t x = 0; x < ow; x++)
            slerp_vec(mid + c1[y] * ow + x, mid + c2[y] * ow + x, c, h * ow, r[y], &AT(d, y, x), dcs);
    xfree(c1);
    xfree(c2);
    xfree(r);
    xfree(mid);
}

/* ---- entry point -------------------------------------------------------------------- */

static plane_fn plane_method(const char *m)
{
    static const struct {
        const char *name;
        plane_fn fn;
    } methods[] = {{"nearest-exact", plane_nearest_exact}, {"bilinear", plane_bilinear},
                   {"area", plane_area},                   {"bicubic", plane_bicubic},
                   {"lanczos", plane_lanczos}};
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (!strcmp(m, methods[i].name))
            return methods[i].fn;
    return NULL;
}

int resample(const float *src, int64_t b, int64_t c, int64_t h, int64_t w,
                  enum resample_layout layout, const char *method, int crop_center,
                  float *dst, int64_t oh, int64_t ow, struct err *e)
{
    if (b < 0 || c < 1 || h < 1 || w < 1 || oh < 1 || ow < 1 || oh > RESAMPLE_MAX_SIDE ||
        ow > RESAMPLE_MAX_SIDE)
        return err_set(e, ERR_INVALID, "cannot resize %lldx%lld to %lldx%lld", (long long)w,
                       (long long)h, (long long)ow, (long long)oh);
    if (!method)
        method = "";
    plane_fn fn = plane_method(method);
    if (!fn && strcmp(method, "bislerp") != 0)
        return err_set(e, ERR_INVALID, "unknown upscale method '%s'", method);
    /* Crop to the target aspect (common_upscale's crop = "center"). */
    int64_t x0 = 0, y0 = 0, ch = h, cw = w;
    if (crop_center) {
        double old_aspect = (double)w / (double)h, new_aspect = (double)ow / (double)oh;
        if (old_aspect > new_aspect)
            x0 = (int64_t)pynum_round_half_even((w - w * (new_aspect / old_aspect)) / 2.0);
        else if (old_aspect < new_aspect)
            y0 = (int64_t)pynum_round_half_even((h - h * (old_aspect / new_aspect)) / 2.0);
        ch = h - 2 * y0;
        cw = w - 2 * x0;
        if (ch < 1 || cw < 1)
            return err_set(e, ERR_INVALID, "center crop leaves nothing of %lldx%lld",
                           (long long)w, (long long)h);
    }
    /* Strides in floats: channel, pixel and row, for the source and the destination. */
    int planar = layout == RESAMPLE_BCHW;
    int64_t scs = planar ? h * w : 1, sxs = planar ? 1 : c, sys = planar ? w : w * c;
    int64_t dcs = planar ? oh * ow : 1, dxs = planar ? 1 : c, dys = planar ? ow : ow * c;
    for (int64_t n = 0; n < b; n++) {
        const float *s = src + n * c * h * w + y0 * sys + x0 * sxs;
        float *d = dst + n * c * oh * ow;
        if (!fn) {
            sample_bislerp((struct plane_in){s, sxs, sys}, scs, c, ch, cw,
                           (struct plane_out){d, dxs, dys}, dcs, oh, ow);
            continue;
        }
        for (int64_t k = 0; k < c; k++)
            fn((struct plane_in){s + k * scs, sxs, sys}, ch, cw, (struct plane_out){d + k * dcs, dxs, dys},
               oh, ow);
    }
    return 0;
}
