/*
 * ref_unet64 — the float64 reference of the tiny SD1.5 UNet and its ControlNets for the
 * ControlNet tests (test_models_controlnet, test_models_cn_kinds): a naive
 * double-precision implementation written apart from the model code, reading the
 * weights straight from the safetensors file. Batch 1, one sample's activations.
 */
#include "ref_unet64.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "log.h"

/* One sample's activation [c, h, w] (or tokens [h = n, w = 1, c] for the transformer). */


struct act ref_act_new(int c, int h, int w)
{
    struct act a = {.v = xcalloc((size_t)c * h * w, sizeof(double)), .c = c, .h = h, .w = w};
    return a;
}

void ref_act_free(struct act *a)
{
    xfree(a->v);
    a->v = NULL;
}

/* Weights straight from the file, as doubles (owned by the caller). */
const struct st_file *ref_file;
const char *ref_prefix;
double *(*ref_w_hook)(const char *name);

double *ref_w(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double *ref_w(const char *fmt, ...)
{
    char rel[256], name[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof(rel), fmt, ap);
    va_end(ap);
    snprintf(name, sizeof(name), "%s%s", ref_prefix, rel);
    double *hooked = ref_w_hook ? ref_w_hook(name) : NULL;
    if (hooked)
        return hooked;
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

double ref_silu(double x)
{
    return x / (1.0 + exp(-x));
}

/* conv2d k x k, stride s, padding k/2, weights name.weight [co, ci, k, k] + bias. */
struct act ref_conv(const struct act *x, const char *name, int co, int k, int s)
{
    double *w = ref_w("%s.weight", name), *b = ref_w("%s.bias", name);
    int p = k / 2, ho = (x->h + 2 * p - k) / s + 1, wo = (x->w + 2 * p - k) / s + 1;
    struct act o = ref_act_new(co, ho, wo);
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

static void ref_group_norm(struct act *x, const char *name, double eps, int act_silu)
{
    double *g = ref_w("%s.weight", name), *b = ref_w("%s.bias", name);
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
            x->v[gi * n + i] = act_silu ? ref_silu(y) : y;
        }
    }
    xfree(g);
    xfree(b);
}

/* out[n, o] = in[n, i] W[o, i]^T (+ bias). */
double *ref_linear(const double *in, int n, int ci, int co, const char *name, int bias)
{
    double *w = ref_w("%s.weight", name), *b = bias ? ref_w("%s.bias", name) : NULL;
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

static struct act ref_resblock(const struct act *x, const char *p, int co, const double *temb,
                           int te)
{
    char n[96];
    struct act h = ref_act_new(x->c, x->h, x->w);
    memcpy(h.v, x->v, sizeof(double) * x->c * x->h * x->w);
    snprintf(n, sizeof(n), "%s.in_layers.0", p);
    ref_group_norm(&h, n, 1e-5, 1);
    snprintf(n, sizeof(n), "%s.in_layers.2", p);
    struct act h2 = ref_conv(&h, n, co, 3, 1);
    ref_act_free(&h);
    double *st = xmalloc(te * sizeof(double));
    for (int i = 0; i < te; i++)
        st[i] = ref_silu(temb[i]);
    snprintf(n, sizeof(n), "%s.emb_layers.1", p);
    double *em = ref_linear(st, 1, te, co, n, 1);
    for (int c = 0; c < co; c++)
        for (int i = 0; i < h2.h * h2.w; i++)
            h2.v[c * h2.h * h2.w + i] += em[c];
    xfree(st);
    xfree(em);
    snprintf(n, sizeof(n), "%s.out_layers.0", p);
    ref_group_norm(&h2, n, 1e-5, 1);
    snprintf(n, sizeof(n), "%s.out_layers.3", p);
    struct act o = ref_conv(&h2, n, co, 3, 1);
    ref_act_free(&h2);
    if (x->c != co) {
        snprintf(n, sizeof(n), "%s.skip_connection", p);
        struct act s = ref_conv(x, n, co, 1, 1);
        for (int i = 0; i < co * o.h * o.w; i++)
            o.v[i] += s.v[i];
        ref_act_free(&s);
    } else {
        for (int i = 0; i < co * o.h * o.w; i++)
            o.v[i] += x->v[i];
    }
    return o;
}

void ref_layer_norm(const double *x, int n, int c, const char *name, double *out)
{
    double *g = ref_w("%s.weight", name), *b = ref_w("%s.bias", name);
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

int (*ref_attn1_tiles)(const char *block, int depth, int tokens, int *nh, int *nw, int *rows,
                       int *cols);
double *ref_attn1_colsum;
/* the self-attention ref_transformer is in: its block and transformer index, or NULL */
static const char *attn1_block;
static int attn1_depth;

/*
 * The keys query i sees: all of them, or with a HyperTile tiling the chunk [t·L, (t+1)·L)
 * of the tile t = (r / (rows/nh))·nw + c / (cols/nw) that holds i = r·cols + c.
 */
static void key_range(int i, int n, int tiled, int nh, int nw, int rows, int cols, int *j0,
                      int *j1)
{
    *j0 = 0;
    *j1 = n;
    if (!tiled)
        return;
    int r = i / cols, c = i % cols, L = n / (nh * nw);
    int t = (r / (rows / nh)) * nw + c / (cols / nw);
    *j0 = t * L;
    *j1 = (t + 1) * L;
}

/* h[n, c] += to_out(softmax(q k^T / sqrt(d)) v) over `heads`. */
void ref_attention(double *h, const double *xn, int n, int c, const double *src, int s,
                      int cs, const char *p, int heads)
{
    int nh = 1, nw = 1, rows = 0, cols = 0, tiled = 0;
    int self = attn1_block && src == xn;
    if (self && ref_attn1_tiles)
        tiled = ref_attn1_tiles(attn1_block, attn1_depth, n, &nh, &nw, &rows, &cols) &&
                nh * nw > 1;
    double *colsum = self && ref_attn1_colsum && strcmp(attn1_block, "middle_block.1") == 0 &&
                             attn1_depth == 0
                         ? ref_attn1_colsum
                         : NULL;
    if (colsum)
        memset(colsum, 0, (size_t)s * sizeof *colsum);
    char nm[160];
    snprintf(nm, sizeof(nm), "%s.to_q", p);
    double *q = ref_linear(xn, n, c, c, nm, 0);
    snprintf(nm, sizeof(nm), "%s.to_k", p);
    double *k = ref_linear(src, s, cs, c, nm, 0);
    snprintf(nm, sizeof(nm), "%s.to_v", p);
    double *v = ref_linear(src, s, cs, c, nm, 0);
    double *a = xcalloc((size_t)n * c, sizeof(double)), *sc = xmalloc(s * sizeof(double));
    int d = c / heads;
    for (int hd = 0; hd < heads; hd++)
        for (int i = 0; i < n; i++) {
            double mx = -1e300, sum = 0;
            int j0, j1;
            key_range(i, s, tiled, nh, nw, rows, cols, &j0, &j1);
            for (int j = j0; j < j1; j++) {
                double dot = 0;
                for (int t = 0; t < d; t++)
                    dot += q[i * c + hd * d + t] * k[j * c + hd * d + t];
                sc[j] = dot / sqrt((double)d);
                mx = fmax(mx, sc[j]);
            }
            for (int j = j0; j < j1; j++)
                sum += sc[j] = exp(sc[j] - mx);
            for (int j = j0; j < j1; j++) {
                for (int t = 0; t < d; t++)
                    a[i * c + hd * d + t] += sc[j] / sum * v[j * c + hd * d + t];
                if (colsum)
                    colsum[j] += sc[j] / sum / heads;
            }
        }
    snprintf(nm, sizeof(nm), "%s.to_out.0", p);
    double *o = ref_linear(a, n, c, c, nm, 1);
    for (int i = 0; i < n * c; i++)
        h[i] += o[i];
    xfree(q);
    xfree(k);
    xfree(v);
    xfree(a);
    xfree(sc);
    xfree(o);
}

const double *ref_ctx;
const struct act *ref_input;
/* ref_input while ref_unet walks its trunk (a ControlNet's trunk takes none) */
static const struct act *ref_trunk_input;
int ref_tokens, ref_ctx_dim, ref_heads;
void (*ref_middle_patch)(double *h, int n, int c, int st);
static int ref_st; /* SpatialTransformers walked so far in this ref_unet */

static void ref_transformer(struct act *x, const char *p, int depth)
{
    char nm[160];
    int c = x->c, n = x->h * x->w;
    struct act g = ref_act_new(c, x->h, x->w);
    memcpy(g.v, x->v, sizeof(double) * c * n);
    snprintf(nm, sizeof(nm), "%s.norm", p);
    ref_group_norm(&g, nm, 1e-6, 0);
    double *tok = xmalloc((size_t)n * c * sizeof(double));
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            tok[i * c + ch] = g.v[ch * n + i];
    ref_act_free(&g);
    snprintf(nm, sizeof(nm), "%s.proj_in", p);
    double *h = ref_linear(tok, n, c, c, nm, 1), *xn = xmalloc((size_t)n * c * sizeof(double));
    xfree(tok);
    for (int d = 0; d < depth; d++) {
        snprintf(nm, sizeof(nm), "%s.transformer_blocks.%d.norm1", p, d);
        ref_layer_norm(h, n, c, nm, xn);
        snprintf(nm, sizeof(nm), "%s.transformer_blocks.%d.attn1", p, d);
        attn1_block = p;
        attn1_depth = d;
        ref_attention(h, xn, n, c, xn, n, c, nm, ref_heads);
        attn1_block = NULL;
        if (ref_middle_patch)
            ref_middle_patch(h, n, c, ref_st);
        snprintf(nm, sizeof(nm), "%s.transformer_blocks.%d.norm2", p, d);
        ref_layer_norm(h, n, c, nm, xn);
        snprintf(nm, sizeof(nm), "%s.transformer_blocks.%d.attn2", p, d);
        ref_attention(h, xn, n, c, ref_ctx, ref_tokens, ref_ctx_dim, nm, ref_heads);
        snprintf(nm, sizeof(nm), "%s.transformer_blocks.%d.norm3", p, d);
        ref_layer_norm(h, n, c, nm, xn);
        snprintf(nm, sizeof(nm), "%s.transformer_blocks.%d.ff.net.0.proj", p, d);
        double *pr = ref_linear(xn, n, c, 8 * c, nm, 1), *gg = xmalloc((size_t)n * 4 * c * sizeof(double));
        for (int i = 0; i < n; i++)
            for (int j = 0; j < 4 * c; j++) {
                double gate = pr[i * 8 * c + 4 * c + j];
                gg[i * 4 * c + j] = pr[i * 8 * c + j] * 0.5 * gate * (1.0 + erf(gate / sqrt(2.0)));
            }
        snprintf(nm, sizeof(nm), "%s.transformer_blocks.%d.ff.net.2", p, d);
        double *f = ref_linear(gg, n, 4 * c, c, nm, 1);
        for (int i = 0; i < n * c; i++)
            h[i] += f[i];
        xfree(pr);
        xfree(gg);
        xfree(f);
    }
    ref_st++;
    snprintf(nm, sizeof(nm), "%s.proj_out", p);
    double *o = ref_linear(h, n, c, c, nm, 1);
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            x->v[ch * n + i] += o[i * c + ch];
    xfree(h);
    xfree(xn);
    xfree(o);
}

/* time_embed(timestep_embedding(t)): [4 mc], cosine half first. */
static double *ref_time_emb(double t, int mc)
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
    double *h = ref_linear(e, 1, mc, 4 * mc, "time_embed.0", 1);
    for (int i = 0; i < 4 * mc; i++)
        h[i] = ref_silu(h[i]);
    double *o = ref_linear(h, 1, 4 * mc, 4 * mc, "time_embed.2", 1);
    xfree(e);
    xfree(h);
    return o;
}

/* h += ref_trunk_input[ns] (when set), then a copy of h onto the skip stack. */
static void push_skip(struct act *skips, int *ns, struct act *h)
{
    size_t n = (size_t)h->c * h->h * h->w;
    if (ref_trunk_input && ref_trunk_input[*ns].v)
        for (size_t i = 0; i < n; i++)
            h->v[i] += ref_trunk_input[*ns].v[i];
    skips[*ns] = ref_act_new(h->c, h->h, h->w);
    memcpy(skips[(*ns)++].v, h->v, sizeof(double) * n);
}

/* The trunk (input blocks + middle) of a tiny SD1.5 UNet; skips[] get each input
 * block's output (hint added after the first when given), *mid the middle's. */
static int ref_trunk(const struct unet_arch *a, const struct act *x, const double *temb,
                     const struct act *hint, struct act *skips, struct act *mid)
{
    char n[64];
    int ns = 0, idx = 1, mc = a->model_ch, te = 4 * mc;
    struct act h = ref_conv(x, "input_blocks.0.0", mc, 3, 1);
    if (hint)
        for (int i = 0; i < h.c * h.h * h.w; i++)
            h.v[i] += hint->v[i];
    push_skip(skips, &ns, &h);
    for (int lv = 0; lv < a->levels; lv++) {
        for (int r = 0; r < a->res_blocks[lv]; r++, idx++) {
            snprintf(n, sizeof(n), "input_blocks.%d.0", idx);
            struct act o = ref_resblock(&h, n, a->mult[lv] * mc, temb, te);
            ref_act_free(&h);
            h = o;
            if (a->depth[lv]) {
                snprintf(n, sizeof(n), "input_blocks.%d.1", idx);
                ref_transformer(&h, n, a->depth[lv]);
            }
            push_skip(skips, &ns, &h);
        }
        if (lv < a->levels - 1) {
            snprintf(n, sizeof(n), "input_blocks.%d.0.op", idx++);
            struct act o = ref_conv(&h, n, h.c, 3, 2);
            ref_act_free(&h);
            h = o;
            push_skip(skips, &ns, &h);
        }
    }
    struct act m = ref_resblock(&h, "middle_block.0", h.c, temb, te);
    ref_act_free(&h);
    ref_transformer(&m, "middle_block.1", a->depth_mid);
    *mid = ref_resblock(&m, "middle_block.2", m.c, temb, te);
    ref_act_free(&m);
    return ns;
}

int ref_union_types, ref_union_type = -1;

/* temb += control_add_embedding(the one-hot type vector, all zeros for -1). */
static void union_temb(double *temb, int te)
{
    int n = ref_union_types, half = 128;
    double *in = xcalloc((size_t)n * 256, sizeof(double));
    for (int k = 0; k < n; k++)
        for (int i = 0; i < half; i++) {
            float f = expf(-logf(10000.0f) * (float)i / (float)half); /* float32 freqs */
            double arg = (double)((k == ref_union_type ? 1.0f : 0.0f) * f);
            in[k * 256 + i] = cos(arg);
            in[k * 256 + half + i] = sin(arg);
        }
    double *h = ref_linear(in, 1, n * 256, te, "control_add_embedding.linear_1", 1);
    for (int i = 0; i < te; i++)
        h[i] = ref_silu(h[i]);
    double *o = ref_linear(h, 1, te, te, "control_add_embedding.linear_2", 1);
    for (int i = 0; i < te; i++)
        temb[i] += o[i];
    xfree(in);
    xfree(h);
    xfree(o);
}

/* union_controlnet_merge: g += spatial_ch_projs(layer(mean(g) + task_embedding[type])). */
static void union_merge(struct act *g)
{
    int c = g->c, hw = g->h * g->w;
    double *x = xcalloc(c, sizeof(double)), *xn = xmalloc(c * sizeof(double));
    double *task = ref_w("task_embedding");
    for (int ch = 0; ch < c; ch++) {
        for (int i = 0; i < hw; i++)
            x[ch] += g->v[ch * hw + i];
        x[ch] = x[ch] / hw + task[ref_union_type * c + ch];
    }
    ref_layer_norm(x, 1, c, "transformer_layes.0.ln_1", xn);
    double *qkv = ref_linear(xn, 1, c, 3 * c, "transformer_layes.0.attn.in_proj", 1);
    /* a sequence of one token: each head's softmax weight is exp(0) / exp(0) = 1, so the
     * attention's output is v itself */
    double *o = ref_linear(qkv + 2 * c, 1, c, c, "transformer_layes.0.attn.out_proj", 1);
    for (int i = 0; i < c; i++)
        x[i] += o[i];
    xfree(o);
    ref_layer_norm(x, 1, c, "transformer_layes.0.ln_2", xn);
    double *f = ref_linear(xn, 1, c, 4 * c, "transformer_layes.0.mlp.c_fc", 1);
    for (int i = 0; i < 4 * c; i++)
        f[i] = f[i] / (1.0 + exp(-1.702 * f[i])); /* QuickGELU */
    o = ref_linear(f, 1, 4 * c, c, "transformer_layes.0.mlp.c_proj", 1);
    for (int i = 0; i < c; i++)
        x[i] += o[i];
    double *alpha = ref_linear(x, 1, c, c, "spatial_ch_projs", 1);
    for (int ch = 0; ch < c; ch++)
        for (int i = 0; i < hw; i++)
            g->v[ch * hw + i] += alpha[ch];
    xfree(x);
    xfree(xn);
    xfree(task);
    xfree(qkv);
    xfree(o);
    xfree(f);
    xfree(alpha);
}

/* The ControlNet's residuals (times strength): out[0..ns) and out[ns] the middle's. */
int ref_controlnet(const struct unet_arch *a, const struct act *x, double t,
                          const struct act *hint, double strength, struct act *out)
{
    static const int widths[8] = {16, 16, 32, 32, 96, 96, 256, 0};
    struct act skips[UNET_MAX_BLOCKS], mid, h = *hint, g;
    char n[64];
    double *temb = ref_time_emb(t, a->model_ch);
    if (ref_union_types)
        union_temb(temb, 4 * a->model_ch);
    h.v = xmalloc(sizeof(double) * h.c * h.h * h.w);
    memcpy(h.v, hint->v, sizeof(double) * h.c * h.h * h.w);
    for (int i = 0; i < 8; i++) {
        snprintf(n, sizeof(n), "input_hint_block.%d", 2 * i);
        g = ref_conv(&h, n, i < 7 ? widths[i] : a->model_ch, 3, i == 2 || i == 4 || i == 6 ? 2 : 1);
        ref_act_free(&h);
        h = g;
        if (i < 7)
            for (int k = 0; k < h.c * h.h * h.w; k++)
                h.v[k] = ref_silu(h.v[k]);
    }
    if (ref_union_types && ref_union_type >= 0)
        union_merge(&h);
    int ns = ref_trunk(a, x, temb, &h, skips, &mid);
    ref_act_free(&h);
    for (int i = 0; i <= ns; i++) {
        if (i < ns)
            snprintf(n, sizeof(n), "zero_convs.%d.0", i);
        else
            snprintf(n, sizeof(n), "middle_block_out.0");
        out[i] = ref_conv(i < ns ? &skips[i] : &mid, n, i < ns ? skips[i].c : mid.c, 1, 1);
        for (int k = 0; k < out[i].c * out[i].h * out[i].w; k++)
            out[i].v[k] *= strength;
        if (i < ns)
            ref_act_free(&skips[i]);
    }
    ref_act_free(&mid);
    xfree(temb);
    return ns;
}

/* FreeU's patch for ref_unet (NULL: none), as nodes_freelunch.py's output_block_patch. */
const struct unet_freeu *ref_freeu;

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
struct act ref_unet(const struct unet_arch *a, const struct act *x, double t,
                           const struct act *res)
{
    struct act skips[UNET_MAX_BLOCKS], h;
    char n[64];
    int mc = a->model_ch, te = 4 * mc, idx = 0;
    double *temb = ref_time_emb(t, mc);
    ref_st = 0;
    ref_trunk_input = ref_input;
    int ns = ref_trunk(a, x, temb, NULL, skips, &h);
    ref_trunk_input = NULL;
    for (int i = 0; res && res[ns].v && i < h.c * h.h * h.w; i++)
        h.v[i] += res[ns].v[i];
    for (int lv = a->levels - 1; lv >= 0; lv--) {
        for (int r = 0; r <= a->res_blocks[lv]; r++, idx++) {
            struct act s = skips[--ns], cat = ref_act_new(h.c + s.c, h.h, h.w);
            if (res && res[ns].v)
                for (int i = 0; i < s.c * s.h * s.w; i++)
                    s.v[i] += res[ns].v[i];
            if (ref_freeu)
                ref_freeu_patch(&h, &s, mc);
            memcpy(cat.v, h.v, sizeof(double) * h.c * h.h * h.w);
            memcpy(cat.v + h.c * h.h * h.w, s.v, sizeof(double) * s.c * s.h * s.w);
            ref_act_free(&h);
            ref_act_free(&s);
            snprintf(n, sizeof(n), "output_blocks.%d.0", idx);
            h = ref_resblock(&cat, n, a->mult[lv] * mc, temb, te);
            ref_act_free(&cat);
            int sub = 1;
            if (a->depth[lv]) {
                snprintf(n, sizeof(n), "output_blocks.%d.1", idx);
                ref_transformer(&h, n, a->depth[lv]);
                sub = 2;
            }
            if (lv > 0 && r == a->res_blocks[lv]) {
                struct act up = ref_act_new(h.c, skips[ns - 1].h, skips[ns - 1].w);
                for (int c = 0; c < up.c; c++)
                    for (int y = 0; y < up.h; y++)
                        for (int xx = 0; xx < up.w; xx++)
                            up.v[(c * up.h + y) * up.w + xx] =
                                h.v[(c * h.h + y * h.h / up.h) * h.w + xx * h.w / up.w];
                ref_act_free(&h);
                snprintf(n, sizeof(n), "output_blocks.%d.%d.conv", idx, sub);
                h = ref_conv(&up, n, up.c, 3, 1);
                ref_act_free(&up);
            }
        }
    }
    ref_group_norm(&h, "out.0", 1e-5, 1);
    struct act eps = ref_conv(&h, "out.2", a->out_ch, 3, 1);
    ref_act_free(&h);
    xfree(temb);
    return eps;
}
