/*
 * sd_upscale — latent resizing as ComfyUI's common_upscale does it (see
 * sd_upscale.h). Each mode follows PyTorch's CPU kernel: source coordinates
 * in float32, (dst + 0.5)·scale − 0.5, with the clamping that mode uses.
 */
#include "sd_upscale.h"

#include <math.h>
#include <string.h>

#include "alloc.h"

const char *const sd_upscale_methods[] = {"nearest-exact", "bilinear", "area", "bicubic",
                                          "bislerp", NULL};

double sd_round_half_even(double x)
{
    double r = floor(x), f = x - r;
    if (f > 0.5 || (f == 0.5 && fmod(r, 2.0) != 0.0))
        r += 1.0;
    return r;
}

typedef void (*plane_fn)(const float *src, int64_t sstride, int64_t h, int64_t w, float *dst,
                         int64_t oh, int64_t ow);

static void plane_nearest_exact(const float *src, int64_t ss, int64_t h, int64_t w, float *dst,
                                int64_t oh, int64_t ow)
{
    float sh = (float)h / (float)oh, sw = (float)w / (float)ow;
    for (int64_t y = 0; y < oh; y++) {
        int64_t iy = (int64_t)floorf(((float)y + 0.5f) * sh);
        if (iy > h - 1)
            iy = h - 1;
        for (int64_t x = 0; x < ow; x++) {
            int64_t ix = (int64_t)floorf(((float)x + 0.5f) * sw);
            if (ix > w - 1)
                ix = w - 1;
            dst[y * ow + x] = src[iy * ss + ix];
        }
    }
}

/* Source index and weights of bilinear (align_corners = False) along one axis. */
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

static void plane_bilinear(const float *src, int64_t ss, int64_t h, int64_t w, float *dst,
                           int64_t oh, int64_t ow)
{
    for (int64_t y = 0; y < oh; y++) {
        int64_t y0, y1;
        float ly0, ly1;
        lin_src(y, h, oh, &y0, &y1, &ly0, &ly1);
        for (int64_t x = 0; x < ow; x++) {
            int64_t x0, x1;
            float lx0, lx1;
            lin_src(x, w, ow, &x0, &x1, &lx0, &lx1);
            float top = lx0 * src[y0 * ss + x0] + lx1 * src[y0 * ss + x1];
            float bot = lx0 * src[y1 * ss + x0] + lx1 * src[y1 * ss + x1];
            dst[y * ow + x] = ly0 * top + ly1 * bot;
        }
    }
}

static void plane_area(const float *src, int64_t ss, int64_t h, int64_t w, float *dst,
                       int64_t oh, int64_t ow)
{
    /* adaptive_avg_pool2d: [floor(i·in/out), ceil((i+1)·in/out)) */
    for (int64_t y = 0; y < oh; y++) {
        int64_t ys = (y * h) / oh, ye = ((y + 1) * h + oh - 1) / oh;
        for (int64_t x = 0; x < ow; x++) {
            int64_t xs = (x * w) / ow, xe = ((x + 1) * w + ow - 1) / ow;
            float sum = 0.0f;
            for (int64_t iy = ys; iy < ye; iy++)
                for (int64_t ix = xs; ix < xe; ix++)
                    sum += src[iy * ss + ix];
            dst[y * ow + x] = sum / (float)((ye - ys) * (xe - xs));
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

static void plane_bicubic(const float *src, int64_t ss, int64_t h, int64_t w, float *dst,
                          int64_t oh, int64_t ow)
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
            for (int k = 0; k < 4; k++) {
                const float *row = src + clampi(iy - 1 + k, h - 1) * ss;
                rows[k] = row[clampi(ix - 1, w - 1)] * cx[0] + row[clampi(ix, w - 1)] * cx[1] +
                          row[clampi(ix + 1, w - 1)] * cx[2] + row[clampi(ix + 2, w - 1)] * cx[3];
            }
            dst[y * ow + x] = rows[0] * cy[0] + rows[1] * cy[1] + rows[2] * cy[2] + rows[3] * cy[3];
        }
    }
}

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

/* bislerp of one sample [c, h, w] (row stride ss, plane stride ps) to [c, oh, ow]. */
static void sample_bislerp(const float *src, int64_t c, int64_t ps, int64_t ss, int64_t h,
                           int64_t w, float *dst, int64_t oh, int64_t ow)
{
    float *mid = xmalloc((size_t)(c * h * ow) * sizeof *mid);
    int64_t *c1 = xmalloc((size_t)(ow > oh ? ow : oh) * sizeof *c1);
    int64_t *c2 = xmalloc((size_t)(ow > oh ? ow : oh) * sizeof *c2);
    float *r = xmalloc((size_t)(ow > oh ? ow : oh) * sizeof *r);
    slerp_axis(w, ow, c1, c2, r);
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < ow; x++)
            slerp_vec(src + y * ss + c1[x], src + y * ss + c2[x], c, ps, r[x],
                      mid + y * ow + x, h * ow);
    /* mid is [c, h, ow] with plane stride h·ow. */
    slerp_axis(h, oh, c1, c2, r);
    for (int64_t y = 0; y < oh; y++)
        for (int64_t x = 0; x < ow; x++)
            slerp_vec(mid + c1[y] * ow + x, mid + c2[y] * ow + x, c, h * ow, r[y],
                      dst + y * ow + x, oh * ow);
    xfree(c1);
    xfree(c2);
    xfree(r);
    xfree(mid);
}

int sd_upscale(const float *src, int64_t b, int64_t c, int64_t h, int64_t w, const char *method,
               int crop_center, float *dst, int64_t oh, int64_t ow, struct err *e)
{
    if (b < 1 || c < 1 || h < 1 || w < 1 || oh < 1 || ow < 1 || oh > 65536 || ow > 65536)
        return err_set(e, ERR_INVALID, "cannot resize a %lldx%lld latent to %lldx%lld",
                       (long long)w, (long long)h, (long long)ow, (long long)oh);
    /* Crop to the target aspect (common_upscale's crop = "center"). */
    int64_t x0 = 0, y0 = 0, ch = h, cw = w;
    if (crop_center) {
        double old_aspect = (double)w / (double)h, new_aspect = (double)ow / (double)oh;
        if (old_aspect > new_aspect)
            x0 = (int64_t)sd_round_half_even((w - w * (new_aspect / old_aspect)) / 2.0);
        else if (old_aspect < new_aspect)
            y0 = (int64_t)sd_round_half_even((h - h * (old_aspect / new_aspect)) / 2.0);
        ch = h - 2 * y0;
        cw = w - 2 * x0;
        if (ch < 1 || cw < 1)
            return err_set(e, ERR_INVALID, "center crop leaves nothing of a %lldx%lld latent",
                           (long long)w, (long long)h);
    }
    plane_fn fn = NULL;
    if (!method)
        method = "";
    if (!strcmp(method, "nearest-exact"))
        fn = plane_nearest_exact;
    else if (!strcmp(method, "bilinear"))
        fn = plane_bilinear;
    else if (!strcmp(method, "area"))
        fn = plane_area;
    else if (!strcmp(method, "bicubic"))
        fn = plane_bicubic;
    else if (strcmp(method, "bislerp") != 0)
        return err_set(e, ERR_INVALID, "unknown upscale method '%s'", method);
    for (int64_t n = 0; n < b; n++) {
        const float *s = src + n * c * h * w + y0 * w + x0;
        float *d = dst + n * c * oh * ow;
        if (fn) {
            for (int64_t k = 0; k < c; k++)
                fn(s + k * h * w, w, ch, cw, d + k * oh * ow, oh, ow);
        } else {
            sample_bislerp(s, c, h * w, w, ch, cw, d, oh, ow);
        }
    }
    return 0;
}
