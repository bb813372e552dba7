/*
 * unet_freeu — FreeU / FreeU_V2 output-block patch (see unet_freeu.h).
 */
#include "unet_freeu.h"

#include <math.h>
#include <string.h>

#include "alloc.h"

/* Python's a[start:stop] on a length-len axis: the clamped [*lo, *hi). */
static void py_slice(int start, int stop, int len, int *lo, int *hi)
{
    if (start < 0)
        start += len;
    if (stop < 0)
        stop += len;
    *lo = start < 0 ? 0 : start > len ? len : start;
    *hi = stop < 0 ? 0 : stop > len ? len : stop;
}

/*
 * The unshifted frequencies of the box on one axis: fftshift rolls by len/2, so
 * shifted index i holds frequency (i − len/2) mod len. Returns the count.
 */
static int box_freqs(int len, int threshold, int *out)
{
    int lo, hi, n = 0;
    py_slice(len / 2 - threshold, len / 2 + threshold, len, &lo, &hi);
    for (int i = lo; i < hi; i++)
        out[n++] = ((i - len / 2) % len + len) % len;
    return n;
}

void unet_fourier_filter(float *x, int64_t planes, int h, int w, int threshold, double scale)
{
    if (scale == 1.0 || h < 1 || w < 1)
        return;
    int *ky = xmalloc((size_t)h * sizeof *ky), *kx = xmalloc((size_t)w * sizeof *kx);
    int ny = box_freqs(h, threshold, ky), nx = box_freqs(w, threshold, kx);
    /* e^{-2πi k n / len} for the box's frequencies, per axis */
    double *cy = xmalloc((size_t)ny * h * 2 * sizeof *cy);
    double *cx = xmalloc((size_t)nx * w * 2 * sizeof *cx);
    for (int a = 0; a < ny; a++)
        for (int y = 0; y < h; y++) {
            double t = -2.0 * M_PI * (double)((int64_t)ky[a] * y % h) / h;
            cy[(a * h + y) * 2] = cos(t);
            cy[(a * h + y) * 2 + 1] = sin(t);
        }
    for (int a = 0; a < nx; a++)
        for (int xx = 0; xx < w; xx++) {
            double t = -2.0 * M_PI * (double)((int64_t)kx[a] * xx % w) / w;
            cx[(a * w + xx) * 2] = cos(t);
            cx[(a * w + xx) * 2 + 1] = sin(t);
        }
    double *row = xmalloc((size_t)h * nx * 2 * sizeof *row); /* per row: Σx x·e_x */
    double (*X)[2] = xmalloc((size_t)(ny * nx > 0 ? ny * nx : 1) * sizeof *X);
    for (int64_t p = 0; p < planes; p++) {
        float *v = x + p * h * w;
        for (int y = 0; y < h; y++)
            for (int a = 0; a < nx; a++) {
                double re = 0, im = 0;
                for (int xx = 0; xx < w; xx++) {
                    re += v[y * w + xx] * cx[(a * w + xx) * 2];
                    im += v[y * w + xx] * cx[(a * w + xx) * 2 + 1];
                }
                row[(y * nx + a) * 2] = re;
                row[(y * nx + a) * 2 + 1] = im;
            }
        /* X[ky, kx] for the box, then x += (s − 1)/(h·w) · Re Σ X e^{+2πi(...)} */
        int nb = 0;
        for (int b = 0; b < ny; b++)
            for (int a = 0; a < nx; a++, nb++) {
                double re = 0, im = 0;
                for (int y = 0; y < h; y++) {
                    double r0 = row[(y * nx + a) * 2], i0 = row[(y * nx + a) * 2 + 1];
                    double c = cy[(b * h + y) * 2], s = cy[(b * h + y) * 2 + 1];
                    re += r0 * c - i0 * s;
                    im += r0 * s + i0 * c;
                }
                X[nb][0] = re;
                X[nb][1] = im;
            }
        double f = (scale - 1.0) / ((double)h * w);
        for (int y = 0; y < h; y++)
            for (int xx = 0; xx < w; xx++) {
                double acc = 0;
                nb = 0;
                for (int b = 0; b < ny; b++)
                    for (int a = 0; a < nx; a++, nb++) {
                        /* e^{+iθ} = conj of the forward twiddles: cos θy+θx, −sin */
                        double c1 = cy[(b * h + y) * 2], s1 = -cy[(b * h + y) * 2 + 1];
                        double c2 = cx[(a * w + xx) * 2], s2 = -cx[(a * w + xx) * 2 + 1];
                        double c = c1 * c2 - s1 * s2, s = s1 * c2 + c1 * s2;
                        acc += X[nb][0] * c - X[nb][1] * s;
                    }
                v[y * w + xx] = (float)(v[y * w + xx] + f * acc);
            }
    }
    xfree(X);
    xfree(row);
    xfree(cy);
    xfree(cx);
    xfree(ky);
    xfree(kx);
}

void unet_freeu_scale(const struct unet_freeu *f, float *h, int b, int c, int hh, int ww,
                      double factor)
{
    size_t plane = (size_t)hh * ww;
    float fb = (float)factor, fm = (float)(factor - 1.0);
    float *m = f->v2 ? xmalloc(plane * sizeof *m) : NULL;
    for (int s = 0; s < b; s++) {
        float *hs = h + (size_t)s * c * plane;
        if (f->v2) {
            /* hidden_mean = h.mean(1), min-max normalised over the sample */
            float lo = INFINITY, hi = -INFINITY;
            for (size_t p = 0; p < plane; p++) {
                double acc = 0;
                for (int ch = 0; ch < c; ch++)
                    acc += hs[ch * plane + p];
                m[p] = (float)(acc / c);
                lo = fminf(lo, m[p]);
                hi = fmaxf(hi, m[p]);
            }
            for (size_t p = 0; p < plane; p++)
                m[p] = (m[p] - lo) / (hi - lo);
        }
        for (int ch = 0; ch < c / 2; ch++)
            for (size_t p = 0; p < plane; p++)
                hs[ch * plane + p] *= f->v2 ? fm * m[p] + 1.0f : fb;
    }
    xfree(m);
}

int unet_freeu_output_block(void *user, int i, struct tensor *h, struct tensor *hsp,
                            struct err *e)
{
    const struct unet_freeu *f = user;
    (void)i;
    int64_t c = h->shape[1];
    double b, s;
    if (c == 4 * (int64_t)f->model_ch) {
        b = f->b1;
        s = f->s1;
    } else if (c == 2 * (int64_t)f->model_ch) {
        b = f->b2;
        s = f->s2;
    } else {
        return 0; /* scale_dict has no entry for this width */
    }
    int64_t nh = tensor_numel(h), ns = tensor_numel(hsp);
    float *hb = xmalloc((size_t)nh * sizeof *hb), *sb = xmalloc((size_t)ns * sizeof *sb);
    int rc = tensor_read_f32(h, hb, nh, e);
    if (rc == 0) {
        unet_freeu_scale(f, hb, (int)h->shape[0], (int)c, (int)h->shape[2], (int)h->shape[3], b);
        rc = tensor_write_f32(h, hb, nh, e);
    }
    if (rc == 0)
        rc = tensor_read_f32(hsp, sb, ns, e);
    if (rc == 0) {
        unet_fourier_filter(sb, hsp->shape[0] * hsp->shape[1], (int)hsp->shape[2],
                            (int)hsp->shape[3], 1, s);
        rc = tensor_write_f32(hsp, sb, ns, e);
    }
    xfree(hb);
    xfree(sb);
    return rc;
}
