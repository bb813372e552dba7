/*
 * test_models_controlnet — the ControlNet (models/controlnet/controlnet.h) against a
 * float64 reference written here, apart from the model code: a tiny random SD1.5
 * ControlNet (tools/ckpt_gen, the real control_model.* layout at gen_ckpt --tiny
 * widths) gives residuals equal to the reference's; the UNet with those residuals at
 * two strengths equals the reference UNet with them; strength 0 residuals leave the
 * UNet's output bit-identical; chained residuals add; the UNet with FreeU / FreeU_V2
 * patched into its output blocks (unet_eval_patched) equals the reference with
 * nodes_freelunch.py's patch written here (full 2-D DFT, fftshift-ed box). Loading: the three namings, the
 * family from the shapes (SDXL's too), a diff ControlNet adds the UNet's weights, and
 * bad files (a checkpoint, a missing or misshapen tensor, an unexpected one) fail with
 * a message naming the file.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "checkpoint.h"
#include "ckpt_gen.h"
#include "controlnet.h"
#include "family.h"
#include "harness.h"
#include "memmgr.h"
#include "unet.h"
#include "unet_freeu.h"

static char dir[64];

/* ---- float64 reference ---------------------------------------------------------------- */

/* One sample's activation [c, h, w] (or tokens [h = n, w = 1, c] for the transformer). */
struct act {
    double *v;
    int c, h, w;
};

static struct act act_new(int c, int h, int w)
{
    struct act a = {.v = xcalloc((size_t)c * h * w, sizeof(double)), .c = c, .h = h, .w = w};
    return a;
}

static void act_free(struct act *a)
{
    xfree(a->v);
    a->v = NULL;
}

/* Weights straight from the file, as doubles (owned by the caller). */
static const struct st_file *ref_file;
static const char *ref_prefix;

static double *W(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static double *W(const char *fmt, ...)
{
    char rel[256], name[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof(rel), fmt, ap);
    va_end(ap);
    snprintf(name, sizeof(name), "%s%s", ref_prefix, rel);
    const struct st_tensor *t = st_find(ref_file, name);
    if (!t || t->dtype != ST_DTYPE_F32)
        PANIC("reference: no f32 tensor '%s'", name);
    uint64_t n = st_tensor_numel(t);
    const float *f = st_tensor_data(ref_file, t);
    double *d = xmalloc(n * sizeof(double));
    for (uint64_t i = 0; i < n; i++)
        d[i] = f[i];
    return d;
}

static double silu(double x)
{
    return x / (1.0 + exp(-x));
}

/* conv2d k x k, stride s, padding k/2, weights name.weight [co, ci, k, k] + bias. */
static struct act conv(const struct act *x, const char *name, int co, int k, int s)
{
    double *w = W("%s.weight", name), *b = W("%s.bias", name);
    int p = k / 2, ho = (x->h + 2 * p - k) / s + 1, wo = (x->w + 2 * p - k) / s + 1;
    struct act o = act_new(co, ho, wo);
    for (int oc = 0; oc < co; oc++)
        for (int y = 0; y < ho; y++)
            for (int xx = 0; xx < wo; xx++) {
                double acc = b[oc];
                for (int ic = 0; ic < x->c; ic++)
                    for (int ky = 0; ky < k; ky++)
                        for (int kx = 0; kx < k; kx++) {
                            int iy = y * s + ky - p, ix = xx * s + kx - p;
                            if (iy < 0 || ix < 0 || iy >= x->h || ix >= x->w)
                                continue;
                            acc += w[((oc * x->c + ic) * k + ky) * k + kx] *
                                   x->v[(ic * x->h + iy) * x->w + ix];
                        }
                o.v[(oc * ho + y) * wo + xx] = acc;
            }
    xfree(w);
    xfree(b);
    return o;
}

static void group_norm(struct act *x, const char *name, double eps, int act_silu)
{
    double *g = W("%s.weight", name), *b = W("%s.bias", name);
    int cpg = x->c / 32, hw = x->h * x->w;
    for (int gi = 0; gi < 32; gi++) {
        double m = 0, v = 0;
        int n = cpg * hw;
        for (int i = 0; i < n; i++)
            m += x->v[gi * n + i];
        m /= n;
        for (int i = 0; i < n; i++)
            v += (x->v[gi * n + i] - m) * (x->v[gi * n + i] - m);
        v /= n;
        for (int i = 0; i < n; i++) {
            int ch = gi * cpg + i / hw;
            double y = (x->v[gi * n + i] - m) / sqrt(v + eps) * g[ch] + b[ch];
            x->v[gi * n + i] = act_silu ? silu(y) : y;
        }
    }
    xfree(g);
    xfree(b);
}

/* out[n, o] = in[n, i] W[o, i]^T (+ bias). */
static double *linear(const double *in, int n, int ci, int co, const char *name, int bias)
{
    double *w = W("%s.weight", name), *b = bias ? W("%s.bias", name) : NULL;
    double *o = xmalloc((size_t)n * co * sizeof(double));
    for (int r = 0; r < n; r++)
        for (int j = 0; j < co; j++) {
            double acc = b ? b[j] : 0;
            for (int i = 0; i < ci; i++)
                acc += in[r * ci + i] * w[j * ci + i];
            o[r * co + j] = acc;
        }
    xfree(w);
    xfree(b);
    return o;
}

static struct act resblock(const struct act *x, const char *p, int co, const double *temb,
                           int te)
{
    char n[96];
    struct act h = act_new(x->c, x->h, x->w);
    memcpy(h.v, x->v, sizeof(double) * x->c * x->h * x->w);
    snprintf(n, sizeof(n), "%s.in_layers.0", p);
    group_norm(&h, n, 1e-5, 1);
    snprintf(n, sizeof(n), "%s.in_layers.2", p);
    struct act h2 = conv(&h, n, co, 3, 1);
    act_free(&h);
    double *st = xmalloc(te * sizeof(double));
    for (int i = 0; i < te; i++)
        st[i] = silu(temb[i]);
    snprintf(n, sizeof(n), "%s.emb_layers.1", p);
    double *em = linear(st, 1, te, co, n, 1);
    for (int c = 0; c < co; c++)
        for (int i = 0; i < h2.h * h2.w; i++)
            h2.v[c * h2.h * h2.w + i] += em[c];
    xfree(st);
    xfree(em);
    snprintf(n, sizeof(n), "%s.out_layers.0", p);
    group_norm(&h2, n, 1e-5, 1);
    snprintf(n, sizeof(n), "%s.out_layers.3", p);
    struct act o = conv(&h2, n, co, 3, 1);
    act_free(&h2);
    if (x->c != co) {
        snprintf(n, sizeof(n), "%s.skip_connection", p);
        struct act s = conv(x, n, co, 1, 1);
        for (int i = 0; i < co * o.h * o.w; i++)
            o.v[i] += s.v[i];
        act_free(&s);
    } else {
        for (int i = 0; i < co * o.h * o.w; i++)
            o.v[i] += x->v[i];
    }
    return o;
}

static void layer_norm(const double *x, int n, int c, const char *name, double *out)
{
    double *g = W("%s.weight", name), *b = W("%s.bias", name);
    for (int r = 0; r < n; r++) {
        double m = 0, v = 0;
        for (int i = 0; i < c; i++)
            m += x[r * c + i];
        m /= c;
        for (int i = 0; i < c; i++)
            v += (x[r * c + i] - m) * (x[r * c + i] - m);
        v /= c;
        for (int i = 0; i < c; i++)
            out[r * c + i] = (x[r * c + i] - m) / sqrt(v + 1e-5) * g[i] + b[i];
    }
    xfree(g);
    xfree(b);
}

/* h[n, c] += to_out(softmax(q k^T / sqrt(d)) v) over `heads`. */
static void attention(double *h, const double *xn, int n, int c, const double *src, int s,
                      int cs, const char *p, int heads)
{
    char nm[160];
    snprintf(nm, sizeof(nm), "%s.to_q", p);
    double *q = linear(xn, n, c, c, nm, 0);
    snprintf(nm, sizeof(nm), "%s.to_k", p);
    double *k = linear(src, s, cs, c, nm, 0);
    snprintf(nm, sizeof(nm), "%s.to_v", p);
    double *v = linear(src, s, cs, c, nm, 0);
    double *a = xcalloc((size_t)n * c, sizeof(double)), *sc = xmalloc(s * sizeof(double));
    int d = c / heads;
    for (int hd = 0; hd < heads; hd++)
        for (int i = 0; i < n; i++) {
            double mx = -1e300, sum = 0;
            for (int j = 0; j < s; j++) {
                double dot = 0;
                for (int t = 0; t < d; t++)
                    dot += q[i * c + hd * d + t] * k[j * c + hd * d + t];
                sc[j] = dot / sqrt((double)d);
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j < s; j++)
                sum += sc[j] = exp(sc[j] - mx);
            for (int j = 0; j < s; j++)
                for (int t = 0; t < d; t++)
                    a[i * c + hd * d + t] += sc[j] / sum * v[j * c + hd * d + t];
        }
    snprintf(nm, sizeof(nm), "%s.to_out.0", p);
    double *o = linear(a, n, c, c, nm, 1);
    for (int i = 0; i < n * c; i++)
        h[i] += o[i];
    xfree(q);
    xfree(k);
    xfree(v);
    xfree(a);
    xfree(sc);
    xfree(o);
}

static const double *ref_ctx;
static int ref_tokens, ref_ctx_dim, ref_heads;

static void transformer(struct act *x, const char *p, int depth)
{
    char nm[160];
    int c = x->c, n = x->h * x->w;
    struct act g = act_new(c, x->h, x->w);
    memcpy(g.v, x->v, sizeof(double) * c * n);
    snprintf(nm, sizeof(nm), "%s.norm", p);
    group_norm(&g, nm, 1e-6, 0);
    double *tok = xmalloc((size_t)n * c * sizeof(double));
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            tok[i * c + ch] = g.v[ch * n + i];
    act_free(&g);
    snprintf(nm, sizeof(nm), "%s.proj_in", p);
    double *h = linear(tok, n, c, c, nm, 1), *xn = xmalloc((size_t)n * c * sizeof(double));
    xfree(tok);
    for (int d = 0; d < depth; d++) {
        snprintf(nm, sizeof(nm), "%s.transformer_blocks.%d.norm1", p, d);
        layer_norm(h, n, c, nm, xn);
        snprintf(nm, sizeof(nm), "%s.transformer_blocks.%d.attn1", p, d);
        attention(h, xn, n, c, xn, n, c, nm, ref_heads);
        snprintf(nm, sizeof(nm), "%s.transformer_blocks.%d.norm2", p, d);
        layer_norm(h, n, c, nm, xn);
        snprintf(nm, sizeof(nm), "%s.transformer_blocks.%d.attn2", p, d);
        attention(h, xn, n, c, ref_ctx, ref_tokens, ref_ctx_dim, nm, ref_heads);
        snprintf(nm, sizeof(nm), "%s.transformer_blocks.%d.norm3", p, d);
        layer_norm(h, n, c, nm, xn);
        snprintf(nm, sizeof(nm), "%s.transformer_blocks.%d.ff.net.0.proj", p, d);
        double *pr = linear(xn, n, c, 8 * c, nm, 1), *gg = xmalloc((size_t)n * 4 * c * sizeof(double));
        for (int i = 0; i < n; i++)
            for (int j = 0; j < 4 * c; j++) {
                double gate = pr[i * 8 * c + 4 * c + j];
                gg[i * 4 * c + j] = pr[i * 8 * c + j] * 0.5 * gate * (1.0 + erf(gate / sqrt(2.0)));
            }
        snprintf(nm, sizeof(nm), "%s.transformer_blocks.%d.ff.net.2", p, d);
        double *f = linear(gg, n, 4 * c, c, nm, 1);
        for (int i = 0; i < n * c; i++)
            h[i] += f[i];
        xfree(pr);
        xfree(gg);
        xfree(f);
    }
    snprintf(nm, sizeof(nm), "%s.proj_out", p);
    double *o = linear(h, n, c, c, nm, 1);
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            x->v[ch * n + i] += o[i * c + ch];
    xfree(h);
    xfree(xn);
    xfree(o);
}

/* time_embed(timestep_embedding(t)): [4 mc], cosine half first. */
static double *time_emb(double t, int mc)
{
    int half = mc / 2;
    double *e = xmalloc(mc * sizeof(double));
    for (int i = 0; i < half; i++) {
        /* the frequencies are float32 in ComfyUI (torch.arange(..., dtype=float32)) */
        float f = expf(-logf(10000.0f) * (float)i / (float)half);
        double arg = (double)((float)t * f); /* t * freqs in float32 too */
        e[i] = cos(arg);
        e[half + i] = sin(arg);
    }
    double *h = linear(e, 1, mc, 4 * mc, "time_embed.0", 1);
    for (int i = 0; i < 4 * mc; i++)
        h[i] = silu(h[i]);
    double *o = linear(h, 1, 4 * mc, 4 * mc, "time_embed.2", 1);
    xfree(e);
    xfree(h);
    return o;
}

/* The trunk (input blocks + middle) of a tiny SD1.5 UNet; skips[] get each input
 * block's output (hint added after the first when given), *mid the middle's. */
static int trunk(const struct unet_arch *a, const struct act *x, const double *temb,
                 const struct act *hint, struct act *skips, struct act *mid)
{
    char n[64];
    int ns = 0, idx = 1, mc = a->model_ch, te = 4 * mc;
    struct act h = conv(x, "input_blocks.0.0", mc, 3, 1);
    if (hint)
        for (int i = 0; i < h.c * h.h * h.w; i++)
            h.v[i] += hint->v[i];
    skips[ns] = act_new(h.c, h.h, h.w);
    memcpy(skips[ns++].v, h.v, sizeof(double) * h.c * h.h * h.w);
    for (int lv = 0; lv < a->levels; lv++) {
        for (int r = 0; r < a->res_blocks[lv]; r++, idx++) {
            snprintf(n, sizeof(n), "input_blocks.%d.0", idx);
            struct act o = resblock(&h, n, a->mult[lv] * mc, temb, te);
            act_free(&h);
            h = o;
            if (a->depth[lv]) {
                snprintf(n, sizeof(n), "input_blocks.%d.1", idx);
                transformer(&h, n, a->depth[lv]);
            }
            skips[ns] = act_new(h.c, h.h, h.w);
            memcpy(skips[ns++].v, h.v, sizeof(double) * h.c * h.h * h.w);
        }
        if (lv < a->levels - 1) {
            snprintf(n, sizeof(n), "input_blocks.%d.0.op", idx++);
            struct act o = conv(&h, n, h.c, 3, 2);
            act_free(&h);
            h = o;
            skips[ns] = act_new(h.c, h.h, h.w);
            memcpy(skips[ns++].v, h.v, sizeof(double) * h.c * h.h * h.w);
        }
    }
    struct act m = resblock(&h, "middle_block.0", h.c, temb, te);
    act_free(&h);
    transformer(&m, "middle_block.1", a->depth_mid);
    *mid = resblock(&m, "middle_block.2", m.c, temb, te);
    act_free(&m);
    return ns;
}

/* The ControlNet's residuals (times strength): out[0..ns) and out[ns] the middle's. */
static int ref_controlnet(const struct unet_arch *a, const struct act *x, double t,
                          const struct act *hint, double strength, struct act *out)
{
    static const int widths[8] = {16, 16, 32, 32, 96, 96, 256, 0};
    struct act skips[UNET_MAX_BLOCKS], mid, h = *hint, g;
    char n[64];
    double *temb = time_emb(t, a->model_ch);
    h.v = xmalloc(sizeof(double) * h.c * h.h * h.w);
    memcpy(h.v, hint->v, sizeof(double) * h.c * h.h * h.w);
    for (int i = 0; i < 8; i++) {
        snprintf(n, sizeof(n), "input_hint_block.%d", 2 * i);
        g = conv(&h, n, i < 7 ? widths[i] : a->model_ch, 3, i == 2 || i == 4 || i == 6 ? 2 : 1);
        act_free(&h);
        h = g;
        if (i < 7)
            for (int k = 0; k < h.c * h.h * h.w; k++)
                h.v[k] = silu(h.v[k]);
    }
    int ns = trunk(a, x, temb, &h, skips, &mid);
    act_free(&h);
    for (int i = 0; i <= ns; i++) {
        if (i < ns)
            snprintf(n, sizeof(n), "zero_convs.%d.0", i);
        else
            snprintf(n, sizeof(n), "middle_block_out.0");
        out[i] = conv(i < ns ? &skips[i] : &mid, n, i < ns ? skips[i].c : mid.c, 1, 1);
        for (int k = 0; k < out[i].c * out[i].h * out[i].w; k++)
            out[i].v[k] *= strength;
        if (i < ns)
            act_free(&skips[i]);
    }
    act_free(&mid);
    xfree(temb);
    return ns;
}

/* FreeU's patch for ref_unet (NULL: none), as nodes_freelunch.py's output_block_patch. */
static const struct unet_freeu *ref_freeu;

/*
 * Fourier_filter(x, threshold 1, scale) on one plane: full DFT, the mask built in
 * fftshift-ed coordinates (box [h/2 - 1, h/2 + 1) x [w/2 - 1, w/2 + 1), Python slices)
 * and read back unshifted, inverse DFT, real part.
 */
static void ref_fourier(double *v, int h, int w, double scale)
{
    int n = h * w;
    double *fr = xcalloc((size_t)n, sizeof *fr), *fi = xcalloc((size_t)n, sizeof *fi);
    for (int ky = 0; ky < h; ky++)
        for (int kx = 0; kx < w; kx++)
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    double a = -2 * M_PI * ((double)ky * y / h + (double)kx * x / w);
                    fr[ky * w + kx] += v[y * w + x] * cos(a);
                    fi[ky * w + kx] += v[y * w + x] * sin(a);
                }
    int y0 = h / 2 - 1 < 0 ? h / 2 - 1 + h : h / 2 - 1, y1 = h / 2 + 1 > h ? h : h / 2 + 1;
    int x0 = w / 2 - 1 < 0 ? w / 2 - 1 + w : w / 2 - 1, x1 = w / 2 + 1 > w ? w : w / 2 + 1;
    for (int sy = y0; sy < y1; sy++)
        for (int sx = x0; sx < x1; sx++) {
            int k = ((sy - h / 2 + h) % h) * w + (sx - w / 2 + w) % w;
            fr[k] *= scale;
            fi[k] *= scale;
        }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double acc = 0;
            for (int ky = 0; ky < h; ky++)
                for (int kx = 0; kx < w; kx++) {
                    double a = 2 * M_PI * ((double)ky * y / h + (double)kx * x / w);
                    acc += fr[ky * w + kx] * cos(a) - fi[ky * w + kx] * sin(a);
                }
            v[y * w + x] = acc / n;
        }
    xfree(fr);
    xfree(fi);
}

/* The patch on h and the popped skip s (batch 1). */
static void ref_freeu_patch(struct act *h, struct act *s, int mc)
{
    const struct unet_freeu *f = ref_freeu;
    double b, sc;
    if (h->c == 4 * mc)
        b = f->b1, sc = f->s1;
    else if (h->c == 2 * mc)
        b = f->b2, sc = f->s2;
    else
        return;
    int plane = h->h * h->w;
    double *m = xcalloc((size_t)plane, sizeof *m), lo = INFINITY, hi = -INFINITY;
    for (int p = 0; p < plane; p++) {
        for (int c = 0; c < h->c; c++)
            m[p] += h->v[c * plane + p] / h->c;
        lo = fmin(lo, m[p]);
        hi = fmax(hi, m[p]);
    }
    for (int c = 0; c < h->c / 2; c++)
        for (int p = 0; p < plane; p++)
            h->v[c * plane + p] *= f->v2 ? (b - 1) * (m[p] - lo) / (hi - lo) + 1 : b;
    for (int c = 0; c < s->c; c++)
        ref_fourier(s->v + c * s->h * s->w, s->h, s->w, sc);
    xfree(m);
}

/* eps of a tiny SD1.5 UNet with residuals res[0..ns) (skips) and res[ns] (middle). */
static struct act ref_unet(const struct unet_arch *a, const struct act *x, double t,
                           const struct act *res)
{
    struct act skips[UNET_MAX_BLOCKS], h;
    char n[64];
    int mc = a->model_ch, te = 4 * mc, idx = 0;
    double *temb = time_emb(t, mc);
    int ns = trunk(a, x, temb, NULL, skips, &h);
    for (int i = 0; res && i < h.c * h.h * h.w; i++)
        h.v[i] += res[ns].v[i];
    for (int lv = a->levels - 1; lv >= 0; lv--) {
        for (int r = 0; r <= a->res_blocks[lv]; r++, idx++) {
            struct act s = skips[--ns], cat = act_new(h.c + s.c, h.h, h.w);
            if (res)
                for (int i = 0; i < s.c * s.h * s.w; i++)
                    s.v[i] += res[ns].v[i];
            if (ref_freeu)
                ref_freeu_patch(&h, &s, mc);
            memcpy(cat.v, h.v, sizeof(double) * h.c * h.h * h.w);
            memcpy(cat.v + h.c * h.h * h.w, s.v, sizeof(double) * s.c * s.h * s.w);
            act_free(&h);
            act_free(&s);
            snprintf(n, sizeof(n), "output_blocks.%d.0", idx);
            h = resblock(&cat, n, a->mult[lv] * mc, temb, te);
            act_free(&cat);
            int sub = 1;
            if (a->depth[lv]) {
                snprintf(n, sizeof(n), "output_blocks.%d.1", idx);
                transformer(&h, n, a->depth[lv]);
                sub = 2;
            }
            if (lv > 0 && r == a->res_blocks[lv]) {
                struct act up = act_new(h.c, skips[ns - 1].h, skips[ns - 1].w);
                for (int c = 0; c < up.c; c++)
                    for (int y = 0; y < up.h; y++)
                        for (int xx = 0; xx < up.w; xx++)
                            up.v[(c * up.h + y) * up.w + xx] =
                                h.v[(c * h.h + y * h.h / up.h) * h.w + xx * h.w / up.w];
                act_free(&h);
                snprintf(n, sizeof(n), "output_blocks.%d.%d.conv", idx, sub);
                h = conv(&up, n, up.c, 3, 1);
                act_free(&up);
            }
        }
    }
    group_norm(&h, "out.0", 1e-5, 1);
    struct act eps = conv(&h, "out.2", a->out_ch, 3, 1);
    act_free(&h);
    xfree(temb);
    return eps;
}

/* ---- helpers -------------------------------------------------------------------------- */

static void wave(float *v, size_t n, double a, double b)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(sin(a * (double)i + b) * 0.8);
}

static struct tensor *dev_tensor(struct dev *d, int ndim, const int64_t *shape, const float *v)
{
    struct tensor *t = NULL;
    struct err e = {0};
    if (tensor_new(d, TENSOR_F32, ndim, shape, &t, &e) < 0 ||
        (v && tensor_write_f32(t, v, tensor_numel(t), &e) < 0))
        PANIC("tensor: %s", e.msg);
    return t;
}

static double max_rel(const struct tensor *t, const double *ref, size_t n)
{
    float *v = xmalloc(n * sizeof(float));
    struct err e = {0};
    if (tensor_read_f32(t, v, (int64_t)n, &e) < 0)
        PANIC("read: %s", e.msg);
    double num = 0, den = 1e-12;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs(v[i] - ref[i]));
        den = fmax(den, fabs(ref[i]));
    }
    xfree(v);
    return num / den;
}

static int gen(const char *path, const struct model_config *cfg, unsigned flags,
               const char *drop, const char *extra)
{
    struct ckpt_gen_opts o;
    struct err e = {0};
    ckpt_gen_opts_default(&o);
    o.cfg = *cfg;
    o.seed = 7;
    o.flags = flags;
    o.drop_tensor = drop;
    o.extra_tensor = extra;
    int rc = ckpt_gen_write(&o, path, &e);
    if (rc < 0)
        PANIC("gen '%s': %s", path, e.msg);
    return rc;
}

/* ---- tests ---------------------------------------------------------------------------- */

#define H 8
#define WD 8
#define T 8

static void test_numerics(struct mm *mm)
{
    struct model_config cfg;
    struct err e = {0};
    char cn_path[128], ck_path[128];
    sd15_config_tiny(&cfg);
    snprintf(cn_path, sizeof(cn_path), "%s/cn.safetensors", dir);
    snprintf(ck_path, sizeof(ck_path), "%s/ck.safetensors", dir);
    gen(cn_path, &cfg, CKPT_GEN_CONTROLNET, NULL, NULL);
    gen(ck_path, &cfg, 0, NULL, NULL);
    struct controlnet *cn = NULL;
    EXPECT_OK(controlnet_load(cn_path, NULL, TENSOR_F32, &cn, &e));
    if (!cn)
        return;
    ok(cn->cfg.family == MODEL_FAMILY_SD15 && cn->hint_ch == 3 &&
           cn->cfg.unet.model_ch == cfg.unet.model_ch && cn->cfg.unet.ctx_dim == cfg.unet.ctx_dim,
       "tiny ControlNet detected as SD1.5 (width %d, context %d, hint %d)", cn->cfg.unet.model_ch,
       cn->cfg.unet.ctx_dim, cn->hint_ch);
    static const enum tensor_dtype dt[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt ck;
    EXPECT_OK(model_ckpt_load(ck_path, MODEL_LOAD_UNET, dt, &ck, &e));
    struct patcher *unet = patcher_new(ck.model[MODEL_UNET]);
    size_t act = controlnet_plan_bytes(cn, 1, H, WD, T) + unet_plan_bytes(&cfg.unet, 1, H, WD, T);
    struct mm_request req = {.n_models = 2, .models = {unet, cn->p}, .activation_bytes = act};
    struct mm_report rep;
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    size_t in_plan = 0;
    for (int i = 0; i < rep.n_models; i++)
        if (strcmp(rep.models[i].name, "controlnet") == 0)
            in_plan = rep.models[i].bytes_resident + rep.models[i].bytes_streamed;
    ok(in_plan == patcher_model_bytes(patcher_model_of(cn->p)),
       "the plan holds the ControlNet's %zu bytes (%zu)",
       patcher_model_bytes(patcher_model_of(cn->p)), in_plan);

    /* inputs */
    struct dev *d = patcher_device(unet);
    float xs[4 * H * WD], cs[T * 64], hs[3 * 64 * H * WD];
    wave(xs, 4 * H * WD, 0.37, 0.1);
    wave(cs, T * 64, 0.11, 0.7);
    for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) /* an image in 0..1 */
        hs[i] = (float)(0.5 + 0.5 * sin(0.013 * (double)i));
    struct tensor *x = dev_tensor(d, 4, (const int64_t[]){1, 4, H, WD}, xs);
    struct tensor *ctx = dev_tensor(d, 3, (const int64_t[]){1, T, 64}, cs);
    struct tensor *hint = dev_tensor(d, 4, (const int64_t[]){1, 3, 8 * H, 8 * WD}, hs);
    float t = 421.0f;

    struct act rx = act_new(4, H, WD), rh = act_new(3, 8 * H, 8 * WD);
    double rc_ctx[T * 64];
    for (int i = 0; i < 4 * H * WD; i++)
        rx.v[i] = xs[i];
    for (int i = 0; i < 3 * 64 * H * WD; i++)
        rh.v[i] = hs[i];
    for (int i = 0; i < T * 64; i++)
        rc_ctx[i] = cs[i];
    ref_ctx = rc_ctx;
    ref_tokens = T;
    ref_ctx_dim = 64;
    ref_heads = cfg.unet.heads;

    /* residuals at strength 0.7 */
    struct st_file *cf = NULL;
    EXPECT_OK(st_open(cn_path, &cf, &e));
    ref_file = cf;
    ref_prefix = "control_model.";
    struct act res[UNET_MAX_BLOCKS + 1];
    int ns = ref_controlnet(&cfg.unet, &rx, t, &rh, 0.7, res);
    struct controlnet_out co;
    EXPECT_OK(controlnet_eval(cn, x, &t, ctx, NULL, hint, 0.7f, &co, &e));
    ok(co.n_output == ns && co.middle, "%d residuals and the middle's (reference %d)",
       co.n_output, ns);
    double worst = 0;
    for (int i = 0; i < ns && i < co.n_output; i++)
        worst = fmax(worst, max_rel(co.output[i], res[i].v,
                                    (size_t)res[i].c * res[i].h * res[i].w));
    worst = fmax(worst, max_rel(co.middle, res[ns].v, (size_t)res[ns].c * res[ns].h * res[ns].w));
    ok(worst < 2e-4, "residuals equal the float64 reference (max error / max |ref| %.2e)", worst);
    st_close(cf);

    /* the UNet with them, at 0.7 and at 1.6 (a second eval of the ControlNet) */
    struct st_file *uf = NULL;
    EXPECT_OK(st_open(ck_path, &uf, &e));
    ref_file = uf;
    ref_prefix = "model.diffusion_model.";
    struct tensor *eps = dev_tensor(d, 4, (const int64_t[]){1, 4, H, WD}, NULL);
    struct tensor *eps0 = dev_tensor(d, 4, (const int64_t[]){1, 4, H, WD}, NULL);
    struct unet_control uc;
    for (int pass = 0; pass < 2; pass++) {
        double s = pass ? 1.6 : 0.7;
        if (pass) {
            controlnet_out_release(&co);
            EXPECT_OK(controlnet_eval(cn, x, &t, ctx, NULL, hint, (float)s, &co, &e));
            for (int i = 0; i <= ns; i++)
                for (int k = 0; k < res[i].c * res[i].h * res[i].w; k++)
                    res[i].v[k] *= s / 0.7;
        }
        controlnet_out_view(&co, &uc);
        EXPECT_OK(unet_eval_control(unet, &cfg.unet, x, &t, ctx, NULL, &uc, eps, &e));
        struct act re = ref_unet(&cfg.unet, &rx, t, res);
        double err = max_rel(eps, re.v, 4 * H * WD);
        ok(err < 2e-4, "UNet output with control at strength %.1f equals the reference (%.2e)", s,
           err);
        act_free(&re);
    }
    /* without control: the reference without residuals; the control changed eps */
    EXPECT_OK(unet_eval(unet, &cfg.unet, x, &t, ctx, NULL, eps0, NULL, &e));
    struct act re0 = ref_unet(&cfg.unet, &rx, t, NULL);
    ok(max_rel(eps0, re0.v, 4 * H * WD) < 2e-4, "UNet without control equals the reference");
    ok(max_rel(eps, re0.v, 4 * H * WD) > 1e-2, "the control changes the output (%.2e)",
       max_rel(eps, re0.v, 4 * H * WD));
    act_free(&re0);

    /* FreeU and FreeU_V2 in the output blocks (the tiny widths 32*{1,2,3,3}: only the
     * 2*model_ch level matches, so b2/s2 carry the check), with control residuals */
    for (int v2 = 0; v2 < 2; v2++) {
        struct unet_freeu fu = {.v2 = v2, .model_ch = cfg.unet.model_ch, .b1 = 1.1,
                                .b2 = v2 ? 1.4 : 1.2, .s1 = 0.9, .s2 = 0.2};
        struct unet_patches up = {.output_block = unet_freeu_output_block, .user = &fu};
        struct tensor *epf = dev_tensor(d, 4, (const int64_t[]){1, 4, H, WD}, NULL);
        EXPECT_OK(unet_eval_patched(unet, &cfg.unet, x, &t, ctx, NULL, &uc, &up, epf, &e));
        ref_freeu = &fu;
        struct act rf = ref_unet(&cfg.unet, &rx, t, res);
        ref_freeu = NULL;
        double err = max_rel(epf, rf.v, 4 * H * WD);
        ok(err < 2e-4, "%s in the output blocks (with control) equals the reference (%.2e)",
           v2 ? "FreeU_V2" : "FreeU", err);
        float with[4 * H * WD], without[4 * H * WD];
        double dmax = 0, amax = 0;
        tensor_read_f32(epf, with, 4 * H * WD, &e);
        tensor_free(epf);
        tensor_read_f32(eps, without, 4 * H * WD, &e); /* the same control, no FreeU */
        for (int i = 0; i < 4 * H * WD; i++) {
            dmax = fmax(dmax, fabs(with[i] - without[i]));
            amax = fmax(amax, fabs(without[i]));
        }
        ok(dmax > 1e-3 * amax, "%s changes the output (%.2e)", v2 ? "FreeU_V2" : "FreeU",
           dmax / amax);
        act_free(&rf);
    }

    /* strength 0: bit-identical to no control */
    controlnet_out_release(&co);
    EXPECT_OK(controlnet_eval(cn, x, &t, ctx, NULL, hint, 0.0f, &co, &e));
    controlnet_out_view(&co, &uc);
    EXPECT_OK(unet_eval_control(unet, &cfg.unet, x, &t, ctx, NULL, &uc, eps, &e));
    float a0[4 * H * WD], a1[4 * H * WD];
    tensor_read_f32(eps0, a0, 4 * H * WD, &e);
    tensor_read_f32(eps, a1, 4 * H * WD, &e);
    ok(memcmp(a0, a1, sizeof(a0)) == 0, "strength 0 residuals: the output is bit-identical");

    /* chaining: prev + cur, slot by slot */
    struct controlnet_out c1, c2;
    EXPECT_OK(controlnet_eval(cn, x, &t, ctx, NULL, hint, 0.5f, &c1, &e));
    EXPECT_OK(controlnet_eval(cn, x, &t, ctx, NULL, hint, 0.25f, &c2, &e));
    EXPECT_OK(controlnet_out_merge(&c2, &c1, &e));
    for (int i = 0; i <= ns; i++)
        for (int k = 0; k < res[i].c * res[i].h * res[i].w; k++)
            res[i].v[k] *= 0.75 / 1.6;
    worst = max_rel(c2.middle, res[ns].v, (size_t)res[ns].c * res[ns].h * res[ns].w);
    for (int i = 0; i < ns; i++)
        worst = fmax(worst, max_rel(c2.output[i], res[i].v,
                                    (size_t)res[i].c * res[i].h * res[i].w));
    ok(worst < 2e-4, "two chained ControlNets (0.5, 0.25) add up to 0.75 (%.2e)", worst);
    controlnet_out_release(&c1);
    controlnet_out_release(&c2);
    controlnet_out_release(&co);
    st_close(uf);
    for (int i = 0; i <= ns; i++)
        act_free(&res[i]);
    act_free(&rx);
    act_free(&rh);
    tensor_free(x);
    tensor_free(ctx);
    tensor_free(hint);
    tensor_free(eps);
    tensor_free(eps0);
    mm_node_end(mm, &rep);

    /* a diff ControlNet: its weights are the file's plus the UNet's */
    char df[128];
    snprintf(df, sizeof(df), "%s/diff.safetensors", dir);
    gen(df, &cfg, CKPT_GEN_CONTROLNET | CKPT_GEN_CN_DIFF, NULL, NULL);
    struct controlnet *dcn = NULL;
    EXPECT_OK(controlnet_load(df, unet, TENSOR_F32, &dcn, &e));
    if (dcn) {
        const char *key = "model.diffusion_model.input_blocks.1.0.in_layers.2.weight";
        int l0, i0, l1, i1, l2, i2, nd;
        int64_t sh[4];
        enum tensor_dtype t0, t1, t2;
        patcher_model_find(patcher_model_of(dcn->p), key, &l0, &i0);
        patcher_model_find(patcher_model_of(cn->p), key, &l1, &i1);
        patcher_model_find(ck.model[MODEL_UNET], key, &l2, &i2);
        const float *w0 = patcher_model_host_data(patcher_model_of(dcn->p), l0, i0, &t0, &nd, sh);
        const float *w1 = patcher_model_host_data(patcher_model_of(cn->p), l1, i1, &t1, &nd, sh);
        const float *w2 = patcher_model_host_data(ck.model[MODEL_UNET], l2, i2, &t2, &nd, sh);
        ok(t0 == TENSOR_F32 && t1 == TENSOR_F32 && t2 == TENSOR_F32 && w0[5] == w1[5] + w2[5] &&
               w0[77] == w1[77] + w2[77],
           "diff ControlNet weight = delta + the UNet's");
        controlnet_unref(dcn);
    }
    mm_unload(mm, patcher_model_of(cn->p));
    mm_unload(mm, ck.model[MODEL_UNET]);
    patcher_unref(unet);
    model_ckpt_release(&ck);
    controlnet_unref(cn);
    unlink(df);
    unlink(cn_path);
    unlink(ck_path);
}

static void expect_fail(const char *path, int code, const char *what, const char *needle)
{
    struct controlnet *cn = NULL;
    struct err e = {0};
    int rc = controlnet_load(path, NULL, TENSOR_F32, &cn, &e);
    ok(rc == code && !cn && strstr(e.msg, needle) && strstr(e.msg, path), "%s: %s", what, e.msg);
    controlnet_unref(cn);
}

static void test_files(void)
{
    struct model_config cfg, xl;
    struct err e = {0};
    char p[128];
    sd15_config_tiny(&cfg);
    sdxl_config_tiny(&xl);
    snprintf(p, sizeof(p), "%s/f.safetensors", dir);

    struct controlnet *cn = NULL;
    gen(p, &cfg, CKPT_GEN_CONTROLNET | CKPT_GEN_CN_BARE, NULL, NULL);
    ok(controlnet_load(p, NULL, TENSOR_F32, &cn, &e) == 0 && cn &&
           cn->cfg.family == MODEL_FAMILY_SD15,
       "names without control_model. load (%s)", e.msg);
    controlnet_unref(cn);
    cn = NULL;
    gen(p, &xl, CKPT_GEN_CONTROLNET, NULL, NULL);
    ok(controlnet_load(p, NULL, TENSOR_F32, &cn, &e) == 0 && cn &&
           cn->cfg.family == MODEL_FAMILY_SDXL && cn->cfg.unet.adm_in == xl.unet.adm_in,
       "a tiny SDXL ControlNet is SDXL (context %d, ADM %d) (%s)", cn ? cn->cfg.unet.ctx_dim : 0,
       cn ? cn->cfg.unet.adm_in : 0, e.msg);
    controlnet_unref(cn);

    /* diffusers names: the same weights as the ldm file of the same seed */
    char q[128];
    struct controlnet *a = NULL, *b = NULL;
    snprintf(q, sizeof(q), "%s/g.safetensors", dir);
    gen(p, &xl, CKPT_GEN_CONTROLNET | CKPT_GEN_CN_DIFFUSERS, NULL, NULL);
    gen(q, &xl, CKPT_GEN_CONTROLNET, NULL, NULL);
    struct st_file *df = NULL;
    EXPECT_OK(st_open(p, &df, &e));
    ok(df && st_find(df, "controlnet_cond_embedding.blocks.5.weight") &&
           st_find(df, "controlnet_down_blocks.8.bias") &&
           st_find(df, "down_blocks.1.attentions.1.transformer_blocks.1.attn2.to_k.weight") &&
           st_find(df, "down_blocks.0.downsamplers.0.conv.weight") &&
           st_find(df, "mid_block.resnets.1.time_emb_proj.weight") &&
           st_find(df, "add_embedding.linear_2.bias") && st_find(df, "controlnet_mid_block.weight"),
       "the generator writes diffusers ControlNetModel names");
    st_close(df);
    ok(controlnet_load(p, NULL, TENSOR_F32, &a, &e) == 0 &&
           controlnet_load(q, NULL, TENSOR_F32, &b, &e) == 0,
       "diffusers and ldm files load (%s)", e.msg);
    if (a && b) {
        const struct patcher_model *ma = patcher_model_of(a->p), *mb = patcher_model_of(b->p);
        int same = a->cfg.family == MODEL_FAMILY_SDXL &&
                   !memcmp(&a->cfg, &b->cfg, sizeof(a->cfg)) &&
                   patcher_model_layer_count(ma) == patcher_model_layer_count(mb);
        for (int l = 0; same && l < patcher_model_layer_count(ma); l++)
            for (int i = 0; same && i < patcher_model_weight_count(ma, l); i++) {
                enum tensor_dtype t0, t1;
                int nd;
                int64_t s0[4], s1[4];
                const float *w0 = patcher_model_host_data(ma, l, i, &t0, &nd, s0);
                const float *w1 = patcher_model_host_data(mb, l, i, &t1, &nd, s1);
                same = !strcmp(patcher_model_weight_key(ma, l, i), patcher_model_weight_key(mb, l, i)) &&
                       !memcmp(s0, s1, sizeof(s0)) && w0[0] == w1[0];
            }
        ok(same, "the diffusers SDXL ControlNet holds the ldm file's weights, keys and layers");
    }
    controlnet_unref(a);
    controlnet_unref(b);
    unlink(q);

    gen(p, &cfg, 0, NULL, NULL);
    expect_fail(p, ERR_UNSUPPORTED, "a checkpoint", "checkpoint");
    gen(p, &cfg, CKPT_GEN_CONTROLNET, "zero_convs.3.0.weight", NULL);
    expect_fail(p, ERR_INVALID, "a missing zero conv", "zero_convs.3.0.weight");
    gen(p, &cfg, CKPT_GEN_CONTROLNET, "input_hint_block.0.weight", NULL);
    expect_fail(p, ERR_INVALID, "no hint encoder", "input_hint_block");
    gen(p, &cfg, CKPT_GEN_CONTROLNET, NULL, "control_model.zero_convs.99.0.weight");
    expect_fail(p, ERR_INVALID, "an unexpected tensor", "zero_convs.99.0.weight");
    FILE *fp = fopen(p, "wb");
    fputs("not a safetensors file", fp);
    fclose(fp);
    cn = NULL;
    ok(controlnet_load(p, NULL, TENSOR_F32, &cn, &e) < 0 && !cn, "garbage fails: %s", e.msg);
    unlink(p);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_models_cn.XXXXXX");
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    struct err e = {0};
    EXPECT_OK(mm_new(&mc, &mm, &e));
    test_numerics(mm);
    test_files();
    mm_free(mm);
    rmdir(dir);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
