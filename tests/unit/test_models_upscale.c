/*
 * test_models_upscale — models/upscale: detection of generated ESRGAN (both namings,
 * x1/x2/x4/x8) and SRVGGNetCompact files, the forward pass against a naive float64
 * reference written here (its own convolution, dense blocks, pixel (un)shuffle with
 * reflect padding and nearest upsampling), ComfyUI's tiling against the untiled pass,
 * the tensor ops the models added, and bad input (a checkpoint, a broken file).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "harness.h"
#include "memmgr.h"
#include "upscale.h"
#include "upscale_gen.h"

static char dir[] = "/tmp/latentd_ups_XXXXXX";
static struct mm *mm;

static const char *tmp(const char *name)
{
    static char p[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
    return p[k];
}

/* ---- the float64 reference ------------------------------------------------------------ */

struct img {
    int c, h, w;
    double *v; /* [c][h][w] */
};

static struct img img_new(int c, int h, int w)
{
    struct img m = {c, h, w, xcalloc((size_t)c * h * w, sizeof(double))};
    return m;
}

#define AT(m, ch, y, x) ((m).v[((size_t)(ch) * (m).h + (y)) * (m).w + (x)])

/* The generated weights of one tensor, by role and indices, as doubles. */
struct wfind {
    const struct upscale_gen_opts *o;
    enum ups_role r;
    int i, j, k, bias;
    double *out;
};

static void wfind_one(void *user, const struct ups_weight *w)
{
    struct wfind *f = user;
    if (f->out || w->role != f->r || w->i != f->i || w->j != f->j || w->k != f->k ||
        w->is_bias != f->bias)
        return;
    int64_t n = 1;
    for (int d = 0; d < w->ndim; d++)
        n *= w->shape[d];
    float *tmpf = xmalloc((size_t)n * sizeof(float));
    upscale_gen_fill(f->o, w, tmpf);
    f->out = xmalloc((size_t)n * sizeof(double));
    for (int64_t q = 0; q < n; q++) /* as stored in the file */
        f->out[q] = f->o->dtype == ST_DTYPE_F16 ? tensor_f16_to_f32(tensor_f32_to_f16(tmpf[q]))
                                                : tmpf[q];
    xfree(tmpf);
}

static double *weights(const struct upscale_gen_opts *o, enum ups_role r, int i, int j, int k,
                       int bias)
{
    struct wfind f = {o, r, i, j, k, bias, NULL};
    ups_weights(&o->arch, wfind_one, &f);
    if (!f.out)
        PANIC("no weight role %d %d %d %d", r, i, j, k);
    return f.out;
}

/* 3x3 convolution, zero padding 1, of `in` with the weights of (r, i, j, k). */
static struct img ref_conv(const struct upscale_gen_opts *o, enum ups_role r, int i, int j, int k,
                           const struct img *in, int co)
{
    double *w = weights(o, r, i, j, k, 0), *b = weights(o, r, i, j, k, 1);
    struct img out = img_new(co, in->h, in->w);
    for (int oc = 0; oc < co; oc++)
        for (int y = 0; y < in->h; y++)
            for (int x = 0; x < in->w; x++) {
                double s = b[oc];
                for (int ic = 0; ic < in->c; ic++)
                    for (int dy = -1; dy <= 1; dy++)
                        for (int dx = -1; dx <= 1; dx++) {
                            int yy = y + dy, xx = x + dx;
                            if (yy < 0 || xx < 0 || yy >= in->h || xx >= in->w)
                                continue;
                            s += w[((oc * in->c + ic) * 3 + dy + 1) * 3 + dx + 1] * AT(*in, ic, yy, xx);
                        }
                AT(out, oc, y, x) = s;
            }
    xfree(w);
    xfree(b);
    return out;
}

static void ref_lrelu(struct img *m)
{
    for (size_t q = 0; q < (size_t)m->c * m->h * m->w; q++)
        if (m->v[q] < 0)
            m->v[q] *= 0.2;
}

static struct img ref_cat(const struct img *a, const struct img *b)
{
    struct img m = img_new(a->c + b->c, a->h, a->w);
    size_t pa = (size_t)a->c * a->h * a->w;
    memcpy(m.v, a->v, pa * sizeof(double));
    if (b->c) /* b may be the empty image (no data) that makes this a copy */
        memcpy(m.v + pa, b->v, (size_t)b->c * b->h * b->w * sizeof(double));
    return m;
}

static struct img ref_nearest(const struct img *in, int s)
{
    struct img m = img_new(in->c, in->h * s, in->w * s);
    for (int c = 0; c < m.c; c++)
        for (int y = 0; y < m.h; y++)
            for (int x = 0; x < m.w; x++)
                AT(m, c, y, x) = AT(*in, c, y / s, x / s);
    return m;
}

/* F.pad(x, (0, pw, 0, ph), "reflect") to multiples of s, then pixel_unshuffle. */
static struct img ref_unshuffle(const struct img *in, int s)
{
    int hs = (in->h + s - 1) / s, ws = (in->w + s - 1) / s;
    struct img m = img_new(in->c * s * s, hs, ws);
    for (int c = 0; c < in->c; c++)
        for (int y = 0; y < hs * s; y++)
            for (int x = 0; x < ws * s; x++) {
                int sy = y < in->h ? y : 2 * in->h - 2 - y, sx = x < in->w ? x : 2 * in->w - 2 - x;
                AT(m, c * s * s + (y % s) * s + x % s, y / s, x / s) = AT(*in, c, sy, sx);
            }
    return m;
}

static struct img ref_esrgan(const struct upscale_gen_opts *o, const struct img *x)
{
    const struct ups_arch *a = &o->arch;
    struct img in = a->shuffle > 1 ? ref_unshuffle(x, a->shuffle) : ref_cat(x, &(struct img){0, x->h, x->w, NULL});
    struct img fea = ref_conv(o, UPS_W_FIRST, 0, 0, 0, &in, a->nf);
    struct img h = ref_cat(&fea, &(struct img){0, fea.h, fea.w, NULL});
    for (int b = 0; b < a->nb; b++) {
        struct img r = ref_cat(&h, &(struct img){0, h.h, h.w, NULL});
        for (int j = 1; j <= 3; j++) {
            struct img feats = ref_cat(&r, &(struct img){0, r.h, r.w, NULL});
            for (int k = 1; k <= 4; k++) {
                struct img xk = ref_conv(o, UPS_W_RDB, b, j, k, &feats, a->gc);
                ref_lrelu(&xk);
                struct img nf = ref_cat(&feats, &xk);
                xfree(feats.v);
                xfree(xk.v);
                feats = nf;
            }
            struct img x5 = ref_conv(o, UPS_W_RDB, b, j, 5, &feats, a->nf);
            for (size_t q = 0; q < (size_t)r.c * r.h * r.w; q++)
                r.v[q] += 0.2 * x5.v[q];
            xfree(x5.v);
            xfree(feats.v);
        }
        for (size_t q = 0; q < (size_t)h.c * h.h * h.w; q++)
            h.v[q] += 0.2 * r.v[q];
        xfree(r.v);
    }
    struct img body = ref_conv(o, UPS_W_BODY, 0, 0, 0, &h, a->nf);
    for (size_t q = 0; q < (size_t)fea.c * fea.h * fea.w; q++)
        fea.v[q] += body.v[q];
    xfree(body.v);
    xfree(h.v);
    xfree(in.v);
    for (int u = 0; u < a->n_up; u++) {
        struct img up = ref_nearest(&fea, 2);
        xfree(fea.v);
        fea = ref_conv(o, UPS_W_UP, u, 0, 0, &up, a->nf);
        ref_lrelu(&fea);
        xfree(up.v);
    }
    struct img hr = ref_conv(o, UPS_W_HR, 0, 0, 0, &fea, a->nf);
    ref_lrelu(&hr);
    struct img last = ref_conv(o, UPS_W_LAST, 0, 0, 0, &hr, a->out_ch);
    xfree(hr.v);
    xfree(fea.v);
    /* Crop to scale x the unpadded input. */
    struct img out = img_new(a->out_ch, x->h * a->scale, x->w * a->scale);
    for (int c = 0; c < out.c; c++)
        for (int y = 0; y < out.h; y++)
            for (int xx = 0; xx < out.w; xx++)
                AT(out, c, y, xx) = AT(last, c, y, xx);
    xfree(last.v);
    return out;
}

static struct img ref_srvgg(const struct upscale_gen_opts *o, const struct img *x)
{
    const struct ups_arch *a = &o->arch;
    int s = a->scale;
    struct img h = ref_cat(x, &(struct img){0, x->h, x->w, NULL});
    for (int i = 0; i <= a->nb; i++) {
        struct img t = ref_conv(o, UPS_W_VGG, i, 0, 0, &h, a->nf);
        double *slope = weights(o, UPS_W_PRELU, i, 0, 0, 0);
        for (int c = 0; c < t.c; c++)
            for (int q = 0; q < t.h * t.w; q++) {
                double *v = &t.v[(size_t)c * t.h * t.w + q];
                if (*v < 0)
                    *v *= slope[c];
            }
        xfree(slope);
        xfree(h.v);
        h = t;
    }
    struct img last = ref_conv(o, UPS_W_VGG, a->nb + 1, 0, 0, &h, a->out_ch * s * s);
    struct img out = ref_nearest(x, s);
    for (int c = 0; c < a->out_ch; c++)
        for (int y = 0; y < out.h; y++)
            for (int xx = 0; xx < out.w; xx++)
                AT(out, c, y, xx) += AT(last, c * s * s + (y % s) * s + xx % s, y / s, xx / s);
    xfree(last.v);
    xfree(h.v);
    return out;
}

/* ---- running the model ------------------------------------------------------------------ */

static struct img test_image(int c, int h, int w)
{
    struct img m = img_new(c, h, w);
    for (size_t q = 0; q < (size_t)c * h * w; q++)
        m.v[q] = (double)((q * 7919u) % 1000u) / 999.0; /* 0..1, as an IMAGE */
    return m;
}

struct run {
    struct patcher *p;
    struct ups_arch a;
    struct mm_report rep;
    struct tensor *x;
};

static int run_begin(struct run *r, const char *path, const struct img *x, struct err *e)
{
    struct patcher_model *m;
    int rc = ups_load(path, &r->a, &m, e);
    if (rc < 0)
        return rc;
    r->p = patcher_new(m);
    patcher_model_unref(m);
    struct mm_request req = {.n_models = 1, .activation_bytes = (size_t)256 << 20};
    req.models[0] = r->p;
    if ((rc = mm_load_models(mm, &req, &r->rep, e)) < 0)
        return rc;
    int64_t xs[4] = {1, x->c, x->h, x->w};
    if ((rc = tensor_new(patcher_device(r->p), TENSOR_F32, 4, xs, &r->x, e)) < 0)
        return rc;
    float *f = xmalloc((size_t)x->c * x->h * x->w * sizeof(float));
    for (size_t q = 0; q < (size_t)x->c * x->h * x->w; q++)
        f[q] = (float)x->v[q];
    rc = tensor_write_f32(r->x, f, tensor_numel(r->x), e);
    xfree(f);
    return rc;
}

static void run_end(struct run *r)
{
    tensor_free(r->x);
    if (r->p)
        mm_node_end(mm, &r->rep);
    patcher_unref(r->p);
    memset(r, 0, sizeof(*r));
}

/* Whole forward into host floats out[out_ch * H*s * W*s]. */
static int run_whole(struct run *r, float *out, struct err *e)
{
    int64_t os[4] = {1, r->a.out_ch, r->x->shape[2] * r->a.scale, r->x->shape[3] * r->a.scale};
    struct tensor *o = NULL;
    int rc = tensor_new(patcher_device(r->p), TENSOR_F32, 4, os, &o, e);
    if (rc >= 0)
        rc = ups_forward(r->p, &r->a, r->x, o, e);
    if (rc >= 0)
        rc = tensor_read_f32(o, out, tensor_numel(o), e);
    tensor_free(o);
    return rc;
}

/* max |a - ref| / max(1, max |ref|) */
static double rel_err(const float *a, const struct img *ref)
{
    double m = 1, d = 0;
    for (size_t q = 0; q < (size_t)ref->c * ref->h * ref->w; q++) {
        m = fmax(m, fabs(ref->v[q]));
        d = fmax(d, fabs((double)a[q] - ref->v[q]));
    }
    return d / m;
}

static void check_forward(const char *label, const struct upscale_gen_opts *o, int h, int w)
{
    struct err e = {0};
    char name[64];
    snprintf(name, sizeof(name), "%s.safetensors", label);
    const char *path = tmp(name);
    if (upscale_gen_write(o, path, &e) < 0)
        PANIC("gen: %s", e.msg);
    struct img x = test_image(o->arch.in_ch, h, w);
    struct img ref = o->arch.kind == UPS_SRVGG ? ref_srvgg(o, &x) : ref_esrgan(o, &x);
    struct run r = {0};
    float *out = xmalloc((size_t)ref.c * ref.h * ref.w * sizeof(float));
    int rc = run_begin(&r, path, &x, &e);
    ok(rc >= 0, "%s: load (%s)", label, e.msg);
    if (rc >= 0) {
        EXPECT_EQ(r.a.kind, o->arch.kind);
        EXPECT_EQ(r.a.naming, o->arch.naming);
        EXPECT_EQ(r.a.scale, o->arch.scale);
        EXPECT_EQ(r.a.nf, o->arch.nf);
        EXPECT_EQ(r.a.nb, o->arch.nb);
        EXPECT_EQ(r.a.shuffle, o->arch.shuffle);
        EXPECT_EQ(r.a.in_ch, 3);
        rc = run_whole(&r, out, &e);
        ok(rc >= 0, "%s: forward %dx%d (%s)", label, h, w, e.msg);
        if (rc >= 0) {
            double d = rel_err(out, &ref);
            ok(d < 2e-5, "%s: matches the float64 reference (max rel err %.3g)", label, d);
        }
    }
    run_end(&r);
    xfree(out);
    xfree(x.v);
    xfree(ref.v);
    unlink(path);
}

static void test_forward(void)
{
    struct upscale_gen_opts o;
    upscale_gen_opts_tiny(&o, UPS_ESRGAN, 4);
    check_forward("esrgan_x4_new", &o, 11, 9);
    o.arch.naming = UPS_NAMING_OLD;
    check_forward("esrgan_x4_old", &o, 6, 7);
    upscale_gen_opts_tiny(&o, UPS_ESRGAN, 2);
    o.arch.naming = UPS_NAMING_OLD;
    check_forward("esrgan_x2_old_odd", &o, 7, 9); /* reflect pad 7x9 -> 8x10, crop back */
    o.arch.naming = UPS_NAMING_NEW;
    o.arch.gc = 6;
    check_forward("esrgan_x2_new", &o, 8, 6);
    upscale_gen_opts_tiny(&o, UPS_ESRGAN, 1);
    check_forward("esrgan_x1", &o, 6, 5);
    upscale_gen_opts_tiny(&o, UPS_ESRGAN, 8);
    o.arch.nb = 1;
    o.arch.naming = UPS_NAMING_OLD;
    check_forward("esrgan_x8_old", &o, 3, 4);
    upscale_gen_opts_tiny(&o, UPS_SRVGG, 4);
    check_forward("srvgg_x4", &o, 10, 12);
    upscale_gen_opts_tiny(&o, UPS_SRVGG, 2);
    o.arch.nb = 3;
    check_forward("srvgg_x2", &o, 5, 9);
    o.dtype = ST_DTYPE_F16; /* borrowed as f16 from the mapping, widened by the ops */
    check_forward("srvgg_x2_f16", &o, 5, 9);
    upscale_gen_opts_tiny(&o, UPS_ESRGAN, 4);
    o.dtype = ST_DTYPE_F16;
    check_forward("esrgan_x4_f16", &o, 5, 4);
}

/*
 * ComfyUI's tiles (512, overlap 32) over an image two tiles wide: wherever one tile alone
 * covers a pixel, at least 32 input pixels from any other tile's edge, the result is the
 * untiled one (SRVGG's receptive field is 4 pixels); where two tiles blend it stays
 * close.
 */
static void test_tiled(void)
{
    struct upscale_gen_opts o;
    struct err e = {0};
    upscale_gen_opts_tiny(&o, UPS_SRVGG, 2);
    const char *path = tmp("tiled.safetensors");
    if (upscale_gen_write(&o, path, &e) < 0)
        PANIC("gen: %s", e.msg);
    int h = 24, w = 600, s = 2, OH = h * s, OW = w * s;
    struct img x = test_image(3, h, w);
    struct run r = {0};
    size_t n = (size_t)3 * OH * OW;
    float *whole = xmalloc(n * sizeof(float)), *tiled = xmalloc(n * sizeof(float));
    int rc = run_begin(&r, path, &x, &e);
    if (rc >= 0)
        rc = run_whole(&r, whole, &e);
    int steps = 0;
    if (rc >= 0)
        rc = ups_forward_tiled(r.p, &r.a, r.x, tiled, 512, 32, NULL, NULL, &e);
    ok(rc >= 0, "tiled forward (%s)", e.msg);
    EXPECT_EQ(ups_tiled_steps(1, h, w, 512, 32), 2);
    EXPECT_EQ(ups_tiled_steps(2, 1000, 1000, 512, 32), 2 * 3 * 3);
    EXPECT_EQ(ups_tiled_steps(1, 512, 512, 512, 32), 1);
    (void)steps;
    if (rc >= 0) {
        double single = 0, blend = 0, sum = 0;
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < OH; y++)
                for (int xx = 0; xx < OW; xx++) {
                    size_t q = ((size_t)c * OH + y) * OW + xx;
                    double d = fabs((double)whole[q] - tiled[q]);
                    sum += d;
                    /* tile 1: input x 0..511, tile 2: 88..599 (pulled back inside). */
                    if (xx < 88 * s - 0 || xx >= 512 * s)
                        single = fmax(single, d);
                    else
                        blend = fmax(blend, d);
                }
        ok(single < 1e-5, "tiled == untiled where one tile covers (max diff %.3g)", single);
        ok(blend < 0.05 && sum / (double)n < 1e-3,
           "tiled ~ untiled where tiles blend (max diff %.3g, mean %.3g)", blend, sum / (double)n);
    }
    /* An image that fits one tile runs once, unmasked: equal. */
    run_end(&r);
    xfree(x.v);
    x = test_image(3, 20, 30);
    if ((rc = run_begin(&r, path, &x, &e)) >= 0 && (rc = run_whole(&r, whole, &e)) >= 0)
        rc = ups_forward_tiled(r.p, &r.a, r.x, tiled, 512, 32, NULL, NULL, &e);
    if (rc >= 0) {
        double d = 0;
        for (size_t q = 0; q < (size_t)3 * 40 * 60; q++)
            d = fmax(d, fabs((double)whole[q] - tiled[q]));
        ok(d == 0, "one tile: tiled == untiled exactly (max diff %.3g)", d);
    } else {
        ok(0, "one tile (%s)", e.msg);
    }
    run_end(&r);
    xfree(x.v);
    xfree(whole);
    xfree(tiled);
    unlink(path);
}

/* ESRGAN at tile 8, overlap 2: every tile is a forward, the pass visits them all. */
static int count_tile(void *user)
{
    ++*(int *)user;
    return 0;
}

static int stop_tile(void *user)
{
    (void)user;
    return ERR_INTERRUPTED;
}

static void test_tile_hook(void)
{
    struct upscale_gen_opts o;
    struct err e = {0};
    upscale_gen_opts_tiny(&o, UPS_ESRGAN, 2);
    const char *path = tmp("hook.safetensors");
    if (upscale_gen_write(&o, path, &e) < 0)
        PANIC("gen: %s", e.msg);
    struct img x = test_image(3, 20, 13);
    struct run r = {0};
    float *out = xmalloc((size_t)3 * 40 * 26 * sizeof(float));
    int n = 0, rc = run_begin(&r, path, &x, &e);
    if (rc >= 0)
        rc = ups_forward_tiled(r.p, &r.a, r.x, out, 8, 2, count_tile, &n, &e);
    ok(rc >= 0, "tiled ESRGAN x2 with odd tiles (%s)", e.msg);
    EXPECT_EQ(n, ups_tiled_steps(1, 20, 13, 8, 2));
    EXPECT_EQ(n, 3 * 2);
    rc = ups_forward_tiled(r.p, &r.a, r.x, out, 8, 2, stop_tile, NULL, &e);
    EXPECT_EQ(rc, ERR_INTERRUPTED);
    run_end(&r);
    xfree(out);
    xfree(x.v);
    unlink(path);
}

/* ---- ops ------------------------------------------------------------------------------ */

static void test_ops(void)
{
    struct err e = {0};
    struct dev *d = mm_device(mm);
    int64_t xs[4] = {2, 8, 3, 5}, ss[4] = {2, 2, 6, 10}, us[4] = {2, 8, 2, 3};
    struct tensor *x = NULL, *y = NULL, *z = NULL, *sl = NULL;
    float xv[240], yv[240], zv[240], slv[8];
    for (int i = 0; i < 240; i++)
        xv[i] = (float)((i * 13) % 17) - 8.0f;
    for (int i = 0; i < 8; i++)
        slv[i] = 0.1f * (float)i - 0.2f;
    tensor_new(d, TENSOR_F32, 4, xs, &x, &e);
    tensor_new(d, TENSOR_F32, 4, ss, &y, &e);
    tensor_new(d, TENSOR_F32, 1, (int64_t[]){8}, &sl, &e);
    tensor_write_f32(x, xv, 240, &e);
    tensor_write_f32(sl, slv, 8, &e);
    /* pixel_shuffle: out[n, c, h*2+i, w*2+j] = x[n, c*4 + i*2 + j, h, w] */
    EXPECT_OK(tensor_pixel_shuffle(y, x, 2, &e));
    tensor_read_f32(y, yv, 240, &e);
    int bad = 0;
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 2; c++)
            for (int yy = 0; yy < 6; yy++)
                for (int xx = 0; xx < 10; xx++)
                    bad += yv[((n * 2 + c) * 6 + yy) * 10 + xx] !=
                           xv[((n * 8 + c * 4 + (yy % 2) * 2 + xx % 2) * 3 + yy / 2) * 5 + xx / 2];
    EXPECT_EQ(bad, 0);
    /* unshuffle inverts it, and pads 3x5 -> 4x6 by reflection. */
    EXPECT_OK(tensor_pixel_unshuffle(x, y, 2, &e));
    tensor_read_f32(x, zv, 240, &e);
    EXPECT_EQ(memcmp(zv, xv, sizeof(zv)), 0);
    tensor_new(d, TENSOR_F32, 4, us, &z, &e);
    struct tensor *x1 = NULL;
    tensor_slice(x, 1, 0, 2, &x1, &e); /* [2, 2, 3, 5], strided */
    EXPECT_OK(tensor_pixel_unshuffle(z, x1, 2, &e));
    float uv[96];
    tensor_read_f32(z, uv, 96, &e);
    bad = 0;
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 2; c++)
            for (int yy = 0; yy < 4; yy++)
                for (int xx = 0; xx < 6; xx++) {
                    int sy = yy < 3 ? yy : 1, sx = xx < 5 ? xx : 3;
                    bad += uv[((n * 8 + c * 4 + (yy % 2) * 2 + xx % 2) * 2 + yy / 2) * 3 + xx / 2] !=
                           xv[((n * 8 + c) * 3 + sy) * 5 + sx];
                }
    EXPECT_EQ(bad, 0);
    e.code = 0;
    ok(tensor_pixel_shuffle(z, x, 2, &e) == ERR_INVALID, "pixel_shuffle: bad shape refused (%s)",
       e.msg);
    /* leaky_relu and prelu */
    struct tensor *a = NULL;
    tensor_new(d, TENSOR_F32, 4, xs, &a, &e);
    EXPECT_OK(tensor_leaky_relu(a, x, 0.2f, &e));
    tensor_read_f32(a, zv, 240, &e);
    bad = 0;
    for (int i = 0; i < 240; i++)
        bad += zv[i] != (xv[i] >= 0 ? xv[i] : xv[i] * 0.2f);
    EXPECT_EQ(bad, 0);
    EXPECT_OK(tensor_prelu(a, x, sl, &e));
    tensor_read_f32(a, zv, 240, &e);
    bad = 0;
    for (int i = 0; i < 240; i++)
        bad += zv[i] != (xv[i] >= 0 ? xv[i] : xv[i] * slv[(i / 15) % 8]);
    EXPECT_EQ(bad, 0);
    e.code = 0;
    ok(tensor_prelu(a, x, x1, &e) == ERR_INVALID, "prelu: slope count refused (%s)", e.msg);
    tensor_free(a);
    tensor_free(x1);
    tensor_free(x);
    tensor_free(y);
    tensor_free(z);
    tensor_free(sl);
}

/* ---- bad input ---------------------------------------------------------------------------- */

static void expect_refused(const char *label, const char *path, int code, const char *needle)
{
    struct ups_arch a;
    struct patcher_model *m = NULL;
    struct err e = {0};
    int rc = ups_load(path, &a, &m, &e);
    ok(rc == code && !m && strstr(e.msg, needle), "%s refused with %s: %s", label, err_str(code),
       e.msg);
    patcher_model_unref(m);
}

static void test_bad(void)
{
    struct err e = {0};
    struct ckpt_gen_opts co;
    ckpt_gen_opts_default(&co);
    const char *ck = tmp("ckpt.safetensors");
    if (ckpt_gen_write(&co, ck, &e) < 0)
        PANIC("gen ckpt: %s", e.msg);
    expect_refused("a checkpoint", ck, ERR_UNSUPPORTED, "Stable Diffusion checkpoint");
    unlink(ck);

    /* A generated model with one tensor of another shape, and with one too many. */
    struct upscale_gen_opts o;
    upscale_gen_opts_tiny(&o, UPS_ESRGAN, 4);
    const char *p = tmp("bad.safetensors");
    o.arch.gc = 4;
    struct st_writer *w = st_writer_new();
    float zero[8 * 8 * 9] = {0};
    st_writer_add(w, "conv_first.weight", ST_DTYPE_F32, 4, (int64_t[]){8, 3, 3, 3});
    st_writer_add(w, "conv_first.bias", ST_DTYPE_F32, 1, (int64_t[]){8});
    st_writer_add(w, "body.0.rdb1.conv1.weight", ST_DTYPE_F32, 4, (int64_t[]){4, 8, 3, 3});
    st_writer_add(w, "conv_last.weight", ST_DTYPE_F32, 4, (int64_t[]){3, 8, 3, 3});
    if (st_writer_begin(w, p, &e) < 0)
        PANIC("%s", e.msg);
    st_writer_write(w, zero, 8 * 3 * 9 * 4, &e);
    st_writer_write(w, zero, 8 * 4, &e);
    st_writer_write(w, zero, 4 * 8 * 9 * 4, &e);
    st_writer_write(w, zero, 3 * 8 * 9 * 4, &e);
    st_writer_finish(w, &e);
    st_writer_free(w);
    expect_refused("an incomplete ESRGAN", p, ERR_INVALID, "is missing");

    w = st_writer_new();
    st_writer_add(w, "body.0.weight", ST_DTYPE_F32, 4, (int64_t[]){8, 3, 3, 3});
    st_writer_add(w, "body.1.weight", ST_DTYPE_F32, 1, (int64_t[]){8});
    st_writer_add(w, "body.2.weight", ST_DTYPE_F32, 4, (int64_t[]){5, 8, 3, 3});
    if (st_writer_begin(w, p, &e) < 0)
        PANIC("%s", e.msg);
    st_writer_write(w, zero, 8 * 3 * 9 * 4, &e);
    st_writer_write(w, zero, 8 * 4, &e);
    st_writer_write(w, zero, 5 * 8 * 9 * 4, &e);
    st_writer_finish(w, &e);
    st_writer_free(w);
    expect_refused("an SRVGG of no square scale", p, ERR_UNSUPPORTED, "not 3 x scale^2");

    w = st_writer_new();
    st_writer_add(w, "layers.0.residual_group.blocks.0.norm1.weight", ST_DTYPE_F32, 1,
                  (int64_t[]){8});
    if (st_writer_begin(w, p, &e) < 0)
        PANIC("%s", e.msg);
    st_writer_write(w, zero, 8 * 4, &e);
    st_writer_finish(w, &e);
    st_writer_free(w);
    expect_refused("a SwinIR", p, ERR_UNSUPPORTED, "SwinIR");
    unlink(p);

    FILE *f = fopen(p, "wb");
    fputs("not a model", f);
    fclose(f);
    struct ups_arch a;
    struct patcher_model *m = NULL;
    e.code = 0;
    ok(ups_load(p, &a, &m, &e) < 0 && !m, "a text file refused: %s", e.msg);
    unlink(p);
}

int main(void)
{
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct err e = {0};
    if (mm_new(&mc, &mm, &e) < 0) {
        ok(0, "mm_new: %s", e.msg);
        return harness_done();
    }
    test_ops();
    test_forward();
    test_tiled();
    test_tile_hook();
    test_bad();
    mm_free(mm);
    rmdir(dir);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
