/*
 * test_nodes_image — the one resampler (nodes/util/resample.c) and the image nodes
 * of nodes_images.py / nodes_post_processing.py (nodes/nodes_image_extras.c,
 * nodes/nodes_image_post.c), each checked against a float64 reference written
 * here from ComfyUI's and PyTorch's / PIL's formulas, not from our code.
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "harness.h"
#include "node_imgops.h"
#include "node_registry.h"
#include "resample.h"
#include "node_run.h"
#include "nodes_image.h"
#include "pynum.h"
#include "sampling_rng.h"

/* ---- running a node directly ----------------------------------------------------------- */

struct run {
    struct value *in[8];
    struct value *out[3];
    struct node_ctx c;
    int rc;
};

static struct node_env env = {.preview_size = 512};

static void set_in(struct run *r, const struct node_class *cls, const char *name, struct value *v)
{
    int i = node_class_input_index(cls, name);
    ASSERT(i >= 0);
    r->in[i] = v;
}

static const struct value *go(struct run *r, const struct node_class *cls)
{
    node_ctx_init(&r->c, cls, "1", &env, r->in, r->out);
    r->rc = cls->run(&r->c);
    return r->rc == 0 ? r->out[0] : NULL;
}

static void done(struct run *r)
{
    node_ctx_release(&r->c);
    for (int i = 0; i < 8; i++)
        value_unref(r->in[i]);
    for (int i = 0; i < 3; i++)
        value_unref(r->out[i]);
    memset(r, 0, sizeof *r);
}

/* A deterministic pseudo-random image in [0, 1]. */
static struct value *image_rand(int64_t b, int64_t h, int64_t w, int64_t c, uint32_t seed)
{
    struct value *v = value_new_image(b, h, w, c);
    for (size_t k = 0; k < v->numel; k++) {
        seed = seed * 1664525u + 1013904223u;
        v->data[k] = (float)(seed >> 8) / 16777216.0f;
    }
    return v;
}

static double max_diff_f(const float *a, const double *ref, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= m))
            m = d; /* NaN propagates as a failure */
    }
    return m;
}

/* ---- float64 references of interpolate() -------------------------------------------- */

static double ref_cubic(double x)
{
    const double A = -0.75;
    x = fabs(x);
    if (x <= 1)
        return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2)
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0;
}

/* Weights of output position o along an axis, as (index, weight) pairs: returns the count. */
static int ref_taps(const char *m, int64_t in, int64_t out, int64_t o, int64_t *idx, double *wt)
{
    double scale = (double)in / (double)out;
    if (!strcmp(m, "nearest-exact")) {
        int64_t i = (int64_t)floor((o + 0.5) * scale);
        idx[0] = i < in - 1 ? i : in - 1;
        wt[0] = 1;
        return 1;
    }
    if (!strcmp(m, "bilinear")) {
        double s = (o + 0.5) * scale - 0.5;
        s = s < 0 ? 0 : s;
        int64_t i0 = (int64_t)floor(s);
        idx[0] = i0;
        idx[1] = i0 + 1 < in ? i0 + 1 : in - 1;
        wt[1] = s - (double)i0;
        wt[0] = 1 - wt[1];
        return 2;
    }
    if (!strcmp(m, "bicubic")) {
        double s = (o + 0.5) * scale - 0.5, f = floor(s), t = s - f;
        for (int k = 0; k < 4; k++) {
            int64_t i = (int64_t)f - 1 + k;
            idx[k] = i < 0 ? 0 : i > in - 1 ? in - 1 : i;
            wt[k] = ref_cubic(t + 1 - k);
        }
        return 4;
    }
    /* area: adaptive average pooling */
    int64_t s = (o * in) / out, e = ((o + 1) * in + out - 1) / out;
    for (int64_t i = s; i < e; i++) {
        idx[i - s] = i;
        wt[i - s] = 1.0 / (double)(e - s);
    }
    return (int)(e - s);
}

/* interpolate() of [h, w] plane p (row stride w) to [oh, ow] in double. */
static void ref_interp(const char *m, const double *p, int64_t h, int64_t w, double *o, int64_t oh,
                       int64_t ow)
{
    int64_t iy[64], ix[64];
    double wy[64], wx[64];
    for (int64_t y = 0; y < oh; y++) {
        int ny = ref_taps(m, h, oh, y, iy, wy);
        for (int64_t x = 0; x < ow; x++) {
            int nx = ref_taps(m, w, ow, x, ix, wx);
            double acc = 0;
            for (int a = 0; a < ny; a++)
                for (int b = 0; b < nx; b++)
                    acc += wy[a] * wx[b] * p[iy[a] * w + ix[b]];
            o[y * ow + x] = acc;
        }
    }
}

/* PIL's lanczos on 8-bit data in double: weights normalised, rounded per pass. */
static void ref_lanczos_axis(const double *in, int64_t n_in, int64_t stride, double *out,
                             int64_t n_out, int64_t ostride)
{
    double scale = (double)n_in / (double)n_out, fs = scale < 1 ? 1 : scale, support = 3 * fs;
    for (int64_t o = 0; o < n_out; o++) {
        double center = (o + 0.5) * scale, ws = 0, acc = 0;
        for (int64_t i = 0; i < n_in; i++) {
            double x = ((double)i + 0.5 - center) / fs, k;
            if (x <= -3 || x >= 3 || fabs((double)i + 0.5 - center) > support)
                continue;
            k = x == 0 ? 1 : (sin(M_PI * x) / (M_PI * x)) * (sin(M_PI * x / 3) / (M_PI * x / 3));
            ws += k;
            acc += k * in[i * stride];
        }
        double v = floor(acc / ws + 0.5);
        out[o * ostride] = v < 0 ? 0 : v > 255 ? 255 : v;
    }
}

static void test_resample(void)
{
    static const char *const methods[] = {"nearest-exact", "bilinear", "area", "bicubic"};
    static const int64_t sizes[][4] = {{5, 7, 12, 9}, {13, 11, 4, 5}, {6, 6, 6, 6}, {9, 4, 3, 17}};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int64_t h = sizes[si][0], w = sizes[si][1], oh = sizes[si][2], ow = sizes[si][3], C = 3;
        struct value *img = image_rand(2, h, w, C, 7 + (uint32_t)si);
        float *got = xmalloc((size_t)(2 * oh * ow * C) * sizeof(float));
        float *planar_in = xmalloc((size_t)(2 * h * w * C) * sizeof(float));
        float *planar_out = xmalloc((size_t)(2 * oh * ow * C) * sizeof(float));
        double *p = xmalloc((size_t)(h * w) * sizeof(double));
        double *ref = xmalloc((size_t)(2 * oh * ow * C) * sizeof(double));
        double *o = xmalloc((size_t)(oh * ow) * sizeof(double));
        for (int64_t n = 0; n < 2; n++)
            for (int64_t k = 0; k < C; k++)
                for (int64_t i = 0; i < h * w; i++)
                    planar_in[(n * C + k) * h * w + i] = img->data[(n * h * w + i) * C + k];
        for (size_t mi = 0; mi < sizeof methods / sizeof methods[0]; mi++) {
            const char *m = methods[mi];
            EXPECT_OK(node_img_resize(img->data, 2, h, w, C, got, oh, ow, m, 0, NULL));
            for (int64_t n = 0; n < 2; n++)
                for (int64_t k = 0; k < C; k++) {
                    for (int64_t i = 0; i < h * w; i++)
                        p[i] = img->data[(n * h * w + i) * C + k];
                    ref_interp(m, p, h, w, o, oh, ow);
                    for (int64_t i = 0; i < oh * ow; i++)
                        ref[(n * oh * ow + i) * C + k] = o[i];
                }
            double d = max_diff_f(got, ref, (size_t)(2 * oh * ow * C));
            ok(d < 2e-6, "%s %lldx%lld -> %lldx%lld matches the float64 interpolate (max diff %.2g)", m,
               (long long)w, (long long)h, (long long)ow, (long long)oh, d);
            /* The planar layout gives the same bits (latents and images share the kernels). */
            struct err e = {0};
            EXPECT_OK(resample(planar_in, 2, C, h, w, RESAMPLE_BCHW, m, 0, planar_out, oh, ow, &e));
            int same = 1;
            for (int64_t n = 0; n < 2 && same; n++)
                for (int64_t k = 0; k < C; k++)
                    for (int64_t i = 0; i < oh * ow; i++)
                        same &= planar_out[(n * C + k) * oh * ow + i] == got[(n * oh * ow + i) * C + k];
            ok(same, "%s: planar and channels-last layouts give identical bits", m);
        }
        /* lanczos: PIL on the truncated 8-bit image. */
        EXPECT_OK(node_img_resize(img->data, 2, h, w, C, got, oh, ow, "lanczos", 0, NULL));
        int64_t equal = 0, worst = 0, total = 2 * oh * ow * C;
        double *mid = xmalloc((size_t)(h * ow) * sizeof(double));
        for (int64_t n = 0; n < 2; n++)
            for (int64_t k = 0; k < C; k++) {
                for (int64_t i = 0; i < h * w; i++)
                    p[i] = floor(fmin(fmax(255.0 * img->data[(n * h * w + i) * C + k], 0), 255));
                const double *src = p;
                if (ow != w) {
                    for (int64_t y = 0; y < h; y++)
                        ref_lanczos_axis(p + y * w, w, 1, mid + y * ow, ow, 1);
                    src = mid;
                }
                for (int64_t x = 0; x < ow; x++) {
                    if (oh != h)
                        ref_lanczos_axis(src + x, h, ow, o + x, oh, ow);
                    else
                        for (int64_t y = 0; y < oh; y++)
                            o[y * ow + x] = src[y * ow + x];
                }
                for (int64_t i = 0; i < oh * ow; i++) {
                    int64_t g = (int64_t)lround(got[(n * oh * ow + i) * C + k] * 255.0);
                    int64_t dd = llabs(g - (int64_t)o[i]);
                    equal += dd == 0;
                    worst = dd > worst ? dd : worst;
                }
            }
        ok(worst <= 1 && equal * 100 >= total * 95,
           "lanczos %lldx%lld -> %lldx%lld: PIL's 8-bit result within one level, %lld/%lld equal",
           (long long)w, (long long)h, (long long)ow, (long long)oh, (long long)equal, (long long)total);
        xfree(mid);
        xfree(got);
        xfree(planar_in);
        xfree(planar_out);
        xfree(p);
        xfree(ref);
        xfree(o);
        value_unref(img);
    }

    /* crop center: 10x6 -> 4x4 narrows to x in [2, 8) (round((10 - 6) / 2)), then resizes. */
    struct value *img = image_rand(1, 6, 10, 1, 3);
    float got[16];
    double p[36], o[16];
    EXPECT_OK(node_img_resize(img->data, 1, 6, 10, 1, got, 4, 4, "bilinear", 1, NULL));
    for (int y = 0; y < 6; y++)
        for (int x = 0; x < 6; x++)
            p[y * 6 + x] = img->data[y * 10 + x + 2];
    ref_interp("bilinear", p, 6, 6, o, 4, 4);
    ok(max_diff_f(got, o, 16) < 2e-6, "crop center: the middle 6x6 of 10x6, then bilinear");
    value_unref(img);
    struct err e = {0};
    ok(resample(got, 1, 1, 1, 1, RESAMPLE_BCHW, "nearest-exact", 0, got, 0, 4, &e) == ERR_INVALID,
       "an empty target is refused: %s", e.msg);
    ok(node_img_resize(got, 1, 1, 1, 1, got, 1, 1, "bislerp", 0, &e) == ERR_INVALID,
       "ImageScale's list has no bislerp: %s", e.msg);
    EXPECT_NEAR(pynum_round_half_even(0.49999999999999994), 0, 0);
    EXPECT_NEAR(pynum_round_half_even(-2.5), -2, 0);
}

/* ---- nodes_images.py ------------------------------------------------------------------ */

/* torch.rot90(x, 1, dims=[2, 1]) = flip(H) then swap H and W, on one [H, W] plane. */
static void ref_rot1(const double *in, int64_t h, int64_t w, double *out)
{
    for (int64_t i = 0; i < w; i++)
        for (int64_t j = 0; j < h; j++)
            out[i * h + j] = in[(h - 1 - j) * w + i];
}

static void test_batch_transform(void)
{
    struct run r = {0};
    set_in(&r, &nodes_repeat_image_batch, "image", image_rand(2, 3, 4, 3, 1));
    set_in(&r, &nodes_repeat_image_batch, "amount", value_new_int(3));
    const struct value *o = go(&r, &nodes_repeat_image_batch);
    const struct value *in = r.in[0];
    ok(o && o->shape[0] == 6 && !memcmp(o->data + 4 * 36, in->data, 2 * 36 * sizeof(float)),
       "RepeatImageBatch 3 of a batch of 2: six images, the batch tiled");
    done(&r);

    set_in(&r, &nodes_image_from_batch, "image", image_rand(4, 2, 2, 3, 2));
    set_in(&r, &nodes_image_from_batch, "batch_index", value_new_int(9));
    set_in(&r, &nodes_image_from_batch, "length", value_new_int(3));
    o = go(&r, &nodes_image_from_batch);
    ok(o && o->shape[0] == 1 && !memcmp(o->data, r.in[0]->data + 3 * 12, 12 * sizeof(float)),
       "ImageFromBatch index 9 of 4 clamps to the last image, length to what is left");
    done(&r);

    /* ImageRotate k = 0..3 against k-fold application of the flip + transpose rule. */
    static const char *const rot[] = {"none", "90 degrees", "180 degrees", "270 degrees"};
    int64_t H = 3, W = 5;
    for (int k = 0; k < 4; k++) {
        set_in(&r, &nodes_image_rotate, "image", image_rand(1, H, W, 1, 4));
        set_in(&r, &nodes_image_rotate, "rotation", value_new_string(rot[k]));
        o = go(&r, &nodes_image_rotate);
        double a[15], b[15];
        int64_t h = H, w = W;
        for (int i = 0; i < 15; i++)
            a[i] = r.in[0]->data[i];
        for (int t = 0; t < k; t++) {
            ref_rot1(a, h, w, b);
            memcpy(a, b, sizeof a);
            int64_t s = h;
            h = w;
            w = s;
        }
        ok(o && o->shape[1] == h && o->shape[2] == w && max_diff_f(o->data, a, 15) == 0,
           "ImageRotate %s: %lldx%lld, torch.rot90(k=%d, dims=[2, 1])", rot[k], (long long)o->shape[2],
           (long long)o->shape[1], k);
        done(&r);
    }
    set_in(&r, &nodes_image_flip, "image", image_rand(1, 2, 3, 2, 5));
    set_in(&r, &nodes_image_flip, "flip_method", value_new_string("x-axis: vertically"));
    o = go(&r, &nodes_image_flip);
    ok(o && !memcmp(o->data, r.in[0]->data + 6, 6 * sizeof(float)) &&
           !memcmp(o->data + 6, r.in[0]->data, 6 * sizeof(float)),
       "ImageFlip x-axis swaps the rows");
    done(&r);
    set_in(&r, &nodes_image_flip, "image", image_rand(1, 1, 3, 2, 6));
    set_in(&r, &nodes_image_flip, "flip_method", value_new_string("y-axis: horizontally"));
    o = go(&r, &nodes_image_flip);
    ok(o && o->data[0] == r.in[0]->data[4] && o->data[1] == r.in[0]->data[5] &&
           o->data[4] == r.in[0]->data[0],
       "ImageFlip y-axis mirrors the columns");
    done(&r);

    set_in(&r, &nodes_get_image_size, "image", image_rand(2, 3, 5, 3, 7));
    go(&r, &nodes_get_image_size);
    ok(r.rc == 0 && r.out[0]->i == 5 && r.out[1]->i == 3 && r.out[2]->i == 2,
       "GetImageSize: width 5, height 3, batch 2");
    done(&r);

    /* Sizes: round((w / h) * L) on the short side; megapixels * 2^20 truncated. */
    set_in(&r, &nodes_image_scale_to_max_dimension, "image", image_rand(1, 30, 7, 3, 8));
    set_in(&r, &nodes_image_scale_to_max_dimension, "upscale_method", value_new_string("area"));
    set_in(&r, &nodes_image_scale_to_max_dimension, "largest_size", value_new_int(12));
    o = go(&r, &nodes_image_scale_to_max_dimension);
    ok(o && o->shape[1] == 12 && o->shape[2] == 3, "ImageScaleToMaxDimension 7x30 -> 3x12 (round(2.8))");
    done(&r);
    set_in(&r, &nodes_image_scale_to_total_pixels, "image", image_rand(1, 50, 100, 3, 9));
    set_in(&r, &nodes_image_scale_to_total_pixels, "upscale_method", value_new_string("bilinear"));
    set_in(&r, &nodes_image_scale_to_total_pixels, "megapixels", value_new_float(0.01));
    o = go(&r, &nodes_image_scale_to_total_pixels);
    double s = sqrt(floor(0.01 * 1024 * 1024) / 5000.0);
    ok(o && o->shape[2] == (int64_t)pynum_round_half_even(100 * s) && o->shape[1] == 72 && o->shape[2] == 145,
       "ImageScaleToTotalPixels 100x50 at 0.01 MP -> 145x72");
    done(&r);

    /* ImageStitch right, sizes kept: image1 padded to the taller height (red pads with 0),
     * the 3-wide spacing made even (4), red; image2's single sample repeated. */
    set_in(&r, &nodes_image_stitch, "image1", image_rand(2, 2, 3, 3, 31));
    set_in(&r, &nodes_image_stitch, "image2", image_rand(1, 4, 2, 3, 32));
    set_in(&r, &nodes_image_stitch, "direction", value_new_string("right"));
    set_in(&r, &nodes_image_stitch, "match_image_size", value_new_bool(0));
    set_in(&r, &nodes_image_stitch, "spacing_width", value_new_int(3));
    set_in(&r, &nodes_image_stitch, "spacing_color", value_new_string("red"));
    o = go(&r, &nodes_image_stitch);
    int good = o && o->shape[0] == 2 && o->shape[1] == 4 && o->shape[2] == 9 && o->shape[3] == 3;
    for (int b = 0; good && b < 2; b++)
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 9; x++)
                for (int k = 0; k < 3; k++) {
                    float want;
                    if (x < 3)
                        want = y >= 1 && y < 3 ? r.in[0]->data[((b * 2 + y - 1) * 3 + x) * 3 + k] : 0.0f;
                    else if (x < 7)
                        want = k == 0 ? 1.0f : 0.0f;
                    else
                        want = r.in[5]->data[(y * 2 + x - 7) * 3 + k];
                    good &= o->data[((b * 4 + y) * 9 + x) * 3 + k] == want;
                }
    ok(good, "ImageStitch right: image1 centred on 0, 4 red columns, image2 repeated over the batch");
    done(&r);
    /* up, sizes matched: image2 (2x4, aspect 2) to image1's width 6, height int(6 / 2), lanczos, on top. */
    set_in(&r, &nodes_image_stitch, "image1", image_rand(1, 4, 6, 3, 33));
    set_in(&r, &nodes_image_stitch, "image2", image_rand(1, 2, 4, 3, 34));
    set_in(&r, &nodes_image_stitch, "direction", value_new_string("up"));
    set_in(&r, &nodes_image_stitch, "match_image_size", value_new_bool(1));
    set_in(&r, &nodes_image_stitch, "spacing_width", value_new_int(0));
    set_in(&r, &nodes_image_stitch, "spacing_color", value_new_string("white"));
    o = go(&r, &nodes_image_stitch);
    float top[3 * 6 * 3];
    node_img_resize(r.in[5]->data, 1, 2, 4, 3, top, 3, 6, "lanczos", 0, NULL);
    ok(o && o->shape[1] == 7 && o->shape[2] == 6 && !memcmp(o->data, top, sizeof top) &&
           !memcmp(o->data + 3 * 6 * 3, r.in[0]->data, 4 * 6 * 3 * sizeof(float)),
       "ImageStitch up, matched: image2 resized to 6x3 above image1");
    done(&r);
    set_in(&r, &nodes_image_stitch, "image1", image_rand(1, 2, 2, 3, 35));
    set_in(&r, &nodes_image_stitch, "direction", value_new_string("left"));
    set_in(&r, &nodes_image_stitch, "match_image_size", value_new_bool(1));
    set_in(&r, &nodes_image_stitch, "spacing_width", value_new_int(0));
    set_in(&r, &nodes_image_stitch, "spacing_color", value_new_string("white"));
    o = go(&r, &nodes_image_stitch);
    ok(o == r.in[0], "ImageStitch without image2 returns image1");
    done(&r);

    /* ResizeAndPadImage: 100x50 into 64x64 scales by 0.64 to 64x32, centred at y 16. */
    set_in(&r, &nodes_resize_and_pad_image, "image", image_rand(1, 50, 100, 3, 30));
    set_in(&r, &nodes_resize_and_pad_image, "target_width", value_new_int(64));
    set_in(&r, &nodes_resize_and_pad_image, "target_height", value_new_int(64));
    set_in(&r, &nodes_resize_and_pad_image, "padding_color", value_new_string("white"));
    set_in(&r, &nodes_resize_and_pad_image, "interpolation", value_new_string("bilinear"));
    o = go(&r, &nodes_resize_and_pad_image);
    {
        double *pl = xmalloc(5000 * sizeof *pl), *rs = xmalloc(64 * 32 * sizeof *rs), dmax = 0;
        for (int i = 0; i < 5000; i++)
            pl[i] = r.in[0]->data[i * 3 + 1]; /* green */
        ref_interp("bilinear", pl, 50, 100, rs, 32, 64);
        for (int y = 0; o && y < 64; y++)
            for (int x = 0; x < 64; x++) {
                double want = y >= 16 && y < 48 ? rs[(y - 16) * 64 + x] : 1.0;
                dmax = fmax(dmax, fabs(o->data[(y * 64 + x) * 3 + 1] - want));
            }
        ok(o && o->shape[1] == 64 && o->shape[2] == 64 && dmax < 2e-6,
           "ResizeAndPadImage 100x50 -> 64x64: bilinear 64x32 band on white (max diff %.2g)", dmax);
        xfree(pl);
        xfree(rs);
    }
    done(&r);

    /* ImageAddNoise: clip(image + strength * torch.randn(size, seed)). */
    set_in(&r, &nodes_image_add_noise, "image", image_rand(1, 4, 5, 3, 10));
    set_in(&r, &nodes_image_add_noise, "seed", value_new_u64(UINT64_MAX));
    set_in(&r, &nodes_image_add_noise, "strength", value_new_float(0.25));
    o = go(&r, &nodes_image_add_noise);
    float noise[60];
    double ref[60];
    struct sampling_rng rng;
    sampling_rng_seed(&rng, UINT64_MAX);
    sampling_rng_randn(&rng, noise, 60, SAMPLING_RANDN_V2);
    int clipped = 0;
    for (int i = 0; i < 60; i++) {
        double v = r.in[0]->data[i] + 0.25 * noise[i];
        clipped += v < 0 || v > 1;
        ref[i] = v < 0 ? 0 : v > 1 ? 1 : v;
    }
    ok(o && max_diff_f(o->data, ref, 60) < 1e-6 && clipped > 0,
       "ImageAddNoise: image + 0.25 randn, clipped to [0, 1] (%d clipped)", clipped);
    done(&r);
}

/* ---- nodes_post_processing.py ----------------------------------------------------------- */

static double ref_blend(int mode, double a, double b)
{
    double g = a <= 0.25 ? ((16 * a - 12) * a + 4) * a : sqrt(a);
    switch (mode) {
    case 1: return a * b;
    case 2: return 1 - (1 - a) * (1 - b);
    case 3: return a <= 0.5 ? 2 * a * b : 1 - 2 * (1 - a) * (1 - b);
    case 4: return b <= 0.5 ? a - (1 - 2 * b) * a * (1 - a) : a + (2 * b - 1) * (g - a);
    case 5: return a - b;
    default: return b;
    }
}

/* gaussian_kernel + reflect pad + conv2d + crop, directly in 2-d and double. */
static void ref_gauss(const float *in, int64_t H, int64_t W, int64_t C, int64_t r, double sigma,
                      int sharpen, double alpha, double *out)
{
    int64_t n = 2 * r + 1;
    double *k = xmalloc((size_t)(n * n) * sizeof *k), sum = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double x = -1 + 2.0 * i / (n - 1), y = -1 + 2.0 * j / (n - 1), d = sqrt(x * x + y * y);
            k[i * n + j] = exp(-(d * d) / (2 * sigma * sigma));
            sum += k[i * n + j];
        }
    for (int64_t i = 0; i < n * n; i++)
        k[i] /= sum;
    if (sharpen) {
        double s2 = 0;
        for (int64_t i = 0; i < n * n; i++)
            s2 += (k[i] *= -(alpha * 10));
        k[r * n + r] = k[r * n + r] - s2 + 1.0;
    }
    for (int64_t y = 0; y < H; y++)
        for (int64_t x = 0; x < W; x++)
            for (int64_t ch = 0; ch < C; ch++) {
                double acc = 0;
                for (int64_t i = 0; i < n; i++)
                    for (int64_t j = 0; j < n; j++) {
                        int64_t yy = y + i - r, xx = x + j - r;
                        yy = yy < 0 ? -yy : yy >= H ? 2 * (H - 1) - yy : yy;
                        xx = xx < 0 ? -xx : xx >= W ? 2 * (W - 1) - xx : xx;
                        acc += k[i * n + j] * in[(yy * W + xx) * C + ch];
                    }
                out[(y * W + x) * C + ch] = sharpen ? fmin(fmax(acc, 0), 1) : acc;
            }
    xfree(k);
}

static void test_post(void)
{
    static const char *const modes[] = {"normal", "multiply", "screen", "overlay", "soft_light", "difference"};
    struct run r = {0};
    double ref[4 * 5 * 3 * 2];
    for (int m = 0; m < 6; m++) {
        set_in(&r, &nodes_image_blend, "image1", image_rand(2, 4, 5, 3, 11));
        set_in(&r, &nodes_image_blend, "image2", image_rand(1, 4, 5, 3, 12)); /* broadcast over the batch */
        set_in(&r, &nodes_image_blend, "blend_factor", value_new_float(0.7));
        set_in(&r, &nodes_image_blend, "blend_mode", value_new_string(modes[m]));
        const struct value *o = go(&r, &nodes_image_blend);
        for (int i = 0; i < 120; i++) {
            double a = r.in[0]->data[i], b = r.in[1]->data[i % 60];
            double v = a * (1 - 0.7) + ref_blend(m, a, b) * 0.7;
            ref[i] = v < 0 ? 0 : v > 1 ? 1 : v;
        }
        ok(o && o->shape[0] == 2 && max_diff_f(o->data, ref, 120) < 1e-6, "ImageBlend %s, factor 0.7", modes[m]);
        done(&r);
    }
    set_in(&r, &nodes_image_blend, "image1", image_rand(1, 4, 5, 3, 13));
    set_in(&r, &nodes_image_blend, "image2", image_rand(1, 9, 7, 3, 14));
    set_in(&r, &nodes_image_blend, "blend_factor", value_new_float(1.0));
    set_in(&r, &nodes_image_blend, "blend_mode", value_new_string("normal"));
    const struct value *o = go(&r, &nodes_image_blend);
    float want[60];
    node_img_resize(r.in[1]->data, 1, 9, 7, 3, want, 4, 5, "bicubic", 1, NULL);
    for (int i = 0; i < 60; i++)
        ref[i] = fmin(fmax(want[i], 0), 1);
    ok(o && o->shape[1] == 4 && o->shape[2] == 5 && max_diff_f(o->data, ref, 60) < 1e-6,
       "ImageBlend: image2 of another size is resized (bicubic, center crop) to image1's");
    done(&r);

    int64_t H = 9, W = 8, C = 3;
    double *gref = xmalloc((size_t)(H * W * C) * sizeof *gref);
    static const int64_t radii[] = {1, 3, 7};
    static const double sigmas[] = {1.0, 0.4, 3.0};
    for (int t = 0; t < 3; t++) {
        set_in(&r, &nodes_image_blur, "image", image_rand(1, H, W, C, 15));
        set_in(&r, &nodes_image_blur, "blur_radius", value_new_int(radii[t]));
        set_in(&r, &nodes_image_blur, "sigma", value_new_float(sigmas[t]));
        o = go(&r, &nodes_image_blur);
        ref_gauss(r.in[0]->data, H, W, C, radii[t], sigmas[t], 0, 0, gref);
        double d = o ? max_diff_f(o->data, gref, (size_t)(H * W * C)) : 1;
        ok(d < 1e-5, "ImageBlur radius %lld sigma %g: reflect-padded 2-d Gaussian (max diff %.2g)",
           (long long)radii[t], sigmas[t], d);
        done(&r);
        set_in(&r, &nodes_image_sharpen, "image", image_rand(1, H, W, C, 16));
        set_in(&r, &nodes_image_sharpen, "sharpen_radius", value_new_int(radii[t]));
        set_in(&r, &nodes_image_sharpen, "sigma", value_new_float(sigmas[t]));
        set_in(&r, &nodes_image_sharpen, "alpha", value_new_float(0.5 * (t + 1)));
        o = go(&r, &nodes_image_sharpen);
        ref_gauss(r.in[0]->data, H, W, C, radii[t], sigmas[t], 1, 0.5 * (t + 1), gref);
        d = o ? max_diff_f(o->data, gref, (size_t)(H * W * C)) : 1;
        ok(d < 5e-5, "ImageSharpen radius %lld alpha %g: the centre-corrected kernel (max diff %.2g)",
           (long long)radii[t], 0.5 * (t + 1), d);
        done(&r);
    }
    xfree(gref);
    set_in(&r, &nodes_image_blur, "image", image_rand(1, 4, 20, 3, 17));
    set_in(&r, &nodes_image_blur, "blur_radius", value_new_int(4));
    set_in(&r, &nodes_image_blur, "sigma", value_new_float(1.0));
    go(&r, &nodes_image_blur);
    ok(r.rc < 0 && strstr(r.c.exc_message.ptr, "Padding size"), "ImageBlur radius >= height: %s",
       r.c.exc_message.ptr);
    done(&r);
}

/* ---- nodes_compositing.py -------------------------------------------------------------- */

/* porter_duff_composite in double, written from ComfyUI's table: premultiplied s, d. */
static void ref_pd(int m, double s, double sa, double d, double da, double *oi, double *oa)
{
    switch (m) {
    case 0: *oa = fmin(fmax(sa + da, 0), 1); *oi = fmin(fmax(s + d, 0), 1); return;
    case 1: *oa = 0; *oi = 0; return;
    case 2: *oa = sa + da - sa * da; *oi = (1 - da) * s + (1 - sa) * d + fmin(s, d); return;
    case 3: *oa = da; *oi = d; return;
    case 4: *oa = sa; *oi = sa * d + (1 - da) * s; return;
    case 5: *oa = sa * da; *oi = d * sa; return;
    case 6: *oa = (1 - sa) * da; *oi = (1 - sa) * d; return;
    case 7: *oa = da + (1 - da) * sa; *oi = d + (1 - da) * s; return;
    case 8: *oa = sa + da - sa * da; *oi = (1 - da) * s + (1 - sa) * d + fmax(s, d); return;
    case 9: *oa = sa * da; *oi = s * d; return;
    case 10: *oa = sa + da - sa * da; *oi = 2 * d < da ? 2 * s * d : sa * da - 2 * (da - s) * (sa - d); return;
    case 11: *oa = sa + da - sa * da; *oi = s + d - s * d; return;
    case 12: *oa = sa; *oi = s; return;
    case 13: *oa = da; *oi = da * s + (1 - sa) * d; return;
    case 14: *oa = sa * da; *oi = s * da; return;
    case 15: *oa = (1 - da) * sa; *oi = (1 - da) * s; return;
    case 16: *oa = sa + (1 - sa) * da; *oi = s + (1 - sa) * d; return;
    default: *oa = (1 - da) * sa + (1 - sa) * da; *oi = (1 - da) * s + (1 - sa) * d; return;
    }
}

static struct value *mask_rand(int64_t b, int64_t h, int64_t w, uint32_t seed)
{
    struct value *img = image_rand(b, h, w, 1, seed), *m = value_new_mask(b, h, w);
    memcpy(m->data, img->data, m->numel * sizeof(float));
    value_unref(img);
    return m;
}

static void test_compositing(void)
{
    static const char *const modes[] = {"ADD", "CLEAR", "DARKEN", "DST", "DST_ATOP", "DST_IN", "DST_OUT",
                                        "DST_OVER", "LIGHTEN", "MULTIPLY", "OVERLAY", "SCREEN", "SRC",
                                        "SRC_ATOP", "SRC_IN", "SRC_OUT", "SRC_OVER", "XOR"};
    const int64_t H = 3, W = 4, C = 3, n = 2 * H * W;
    int worst_mode = -1;
    double worst = 0;
    for (int m = 0; m < 18; m++) {
        struct run r = {0};
        set_in(&r, &nodes_porter_duff_image_composite, "source", image_rand(2, H, W, C, 21));
        set_in(&r, &nodes_porter_duff_image_composite, "source_alpha", mask_rand(2, H, W, 22));
        set_in(&r, &nodes_porter_duff_image_composite, "destination", image_rand(3, H, W, C, 23));
        set_in(&r, &nodes_porter_duff_image_composite, "destination_alpha", mask_rand(2, H, W, 24));
        set_in(&r, &nodes_porter_duff_image_composite, "mode", value_new_string(modes[m]));
        const struct value *o = go(&r, &nodes_porter_duff_image_composite);
        double d = o && o->shape[0] == 2 && r.out[1] ? 0 : 1;
        for (int64_t p = 0; o && p < n; p++) {
            double sa = 1 - r.in[1]->data[p], da = 1 - r.in[3]->data[p], oa = 0;
            for (int64_t k = 0; k < C; k++) {
                double oi;
                ref_pd(m, r.in[0]->data[p * C + k] * sa, sa, r.in[2]->data[p * C + k] * da, da, &oi, &oa);
                oi = oa > 1e-5 ? fmin(fmax(oi / oa, 0), 1) : 0;
                d = fmax(d, fabs(o->data[p * C + k] - oi));
            }
            d = fmax(d, fabs(r.out[1]->data[p] - (1 - oa)));
        }
        if (d > worst) {
            worst = d;
            worst_mode = m;
        }
        done(&r);
    }
    ok(worst < 1e-5, "PorterDuffImageComposite: all 18 modes match the float64 table (worst %.2g, %s)", worst,
       worst_mode >= 0 ? modes[worst_mode] : "-");

    struct run r = {0};
    set_in(&r, &nodes_split_image_with_alpha, "image", image_rand(1, 2, 2, 4, 25));
    const struct value *o = go(&r, &nodes_split_image_with_alpha);
    ok(o && o->shape[3] == 3 && o->data[3] == r.in[0]->data[4] && fabsf(r.out[1]->data[1] - (1 - r.in[0]->data[7])) < 1e-7,
       "SplitImageWithAlpha: RGB and the mask 1 - A");
    done(&r);
    set_in(&r, &nodes_split_image_with_alpha, "image", image_rand(1, 2, 2, 3, 26));
    go(&r, &nodes_split_image_with_alpha);
    ok(r.rc == 0 && r.out[1]->data[0] == 0.0f, "SplitImageWithAlpha of RGB: an empty mask");
    done(&r);
    /* Join: the mask resized bilinearly to the image, alpha = 1 - mask. */
    set_in(&r, &nodes_join_image_with_alpha, "image", image_rand(2, 4, 6, 3, 27));
    set_in(&r, &nodes_join_image_with_alpha, "alpha", mask_rand(1, 2, 3, 28));
    o = go(&r, &nodes_join_image_with_alpha);
    double pm[6], rm[24];
    for (int i = 0; i < 6; i++)
        pm[i] = r.in[1]->data[i];
    ref_interp("bilinear", pm, 2, 3, rm, 4, 6);
    double d = o && o->shape[0] == 1 && o->shape[3] == 4 ? 0 : 1;
    for (int p = 0; o && p < 24; p++)
        d = fmax(d, fabs(o->data[p * 4 + 3] - (1 - rm[p])) + fabs(o->data[p * 4] - r.in[0]->data[p * 3]));
    ok(d < 2e-6, "JoinImageWithAlpha: min batch, alpha = 1 - bilinear(mask) (max diff %.2g)", d);
    done(&r);
}

int main(void)
{
    long live = alloc_live_count();
    test_resample();
    test_batch_transform();
    test_post();
    test_compositing();
    ok(alloc_live_count() == live, "no allocation left live (%ld)", alloc_live_count() - live);
    return harness_done();
}
