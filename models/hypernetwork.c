/*
 * Hypernetwork files and their patch (see hypernetwork.h): the document walk follows
 * load_hypernetwork_patch line by line, so a file ComfyUI builds layers from gives the
 * same layers here, in the same order.
 */
#include "hypernetwork.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "buf.h"
#include "pt_load.h"
#include "pt_pickle.h"
#include "safetensors.h"

enum hn_layer_kind { HN_LINEAR, HN_NORM };

struct hn_layer {
    enum hn_layer_kind kind;
    int in, out;  /* widths (a norm: in == out) */
    float *w, *b; /* owned: Linear [out, in] and [out]; LayerNorm gamma and beta [out] */
    int act;      /* a Linear: the activation follows it */
};

struct hn_module {
    struct hn_layer *v; /* owned */
    int n;
};

struct hn_pair {
    int dim;
    struct hn_module m[2]; /* key, value */
};

struct hypernetwork {
    atomic_int refs;
    enum hn_act act;
    struct hn_pair *pairs; /* owned, by dim ascending */
    int n;
    int *dims; /* owned, [n] */
};

static const char *const act_names[] = {"linear", "relu",    "leakyrelu", "elu", "swish",
                                        "tanh",   "sigmoid", "softsign",  "mish"};

/* build(): a file ComfyUI patches nothing with (the reason in e). */
#define HN_NOTHING 1

static int str_is(const struct pt_value *v, const char *s)
{
    return v && v->kind == PT_STR && v->u.str.len == strlen(s) &&
           memcmp(v->u.str.ptr, s, v->u.str.len) == 0;
}

/* sd.get(key, False) as a truth value. */
static int opt_bool(const struct pt_value *root, const char *key)
{
    const struct pt_value *v = pt_dict_get(root, key);
    return v && (v->kind == PT_BOOL || v->kind == PT_INT) && v->u.i != 0;
}

struct ctx {
    const struct st_file *f; /* data = the file's bytes */
    const char *what;
    struct err *e;
};

/* The tensor d[name] as owned floats of `numel` elements, or NULL with e set. */
static float *read_tensor(const struct ctx *c, const struct pt_value *d, const char *name,
                          int ndim, const int64_t *shape)
{
    const struct pt_seq *s = &d->u.seq;
    const struct pt_value *key = NULL, *val = NULL;
    for (size_t i = 0; i + 1 < s->n; i += 2)
        if (str_is(s->items[i], name)) {
            key = s->items[i];
            val = s->items[i + 1];
        }
    if (!val) {
        err_set(c->e, ERR_INVALID, "'%s': module tensor '%s' is missing", c->what, name);
        return NULL;
    }
    struct st_tensor t;
    if (pt_value_tensor(key, val, c->what, &t, c->e) < 0)
        return NULL;
    int good = t.ndim == ndim;
    for (int i = 0; good && i < ndim; i++)
        good = t.shape[i] == shape[i];
    float *out = NULL;
    if (!good) {
        char got[96];
        st_shape_str(&t, got, sizeof got);
        err_set(c->e, ERR_INVALID, "'%s': module tensor '%s' has shape %s, expected [%lld%s%lld]",
                c->what, name, got, (long long)shape[0], ndim > 1 ? ", " : "",
                ndim > 1 ? (long long)shape[1] : 0LL);
    } else {
        out = xmalloc((size_t)st_tensor_numel(&t) * sizeof(float));
        if (st_tensor_to_f32(c->f, &t, out, c->e) < 0) {
            xfree(out);
            out = NULL;
        }
    }
    xfree(t.name);
    return out;
}

static void module_release(struct hn_module *m)
{
    for (int i = 0; i < m->n; i++) {
        xfree(m->v[i].w);
        xfree(m->v[i].b);
    }
    xfree(m->v);
    memset(m, 0, sizeof *m);
}

/*
 * One module from its state dict `d`: the ".weight" keys in order (load_hypernetwork_patch's
 * `linears`), a Linear at each step, then its LayerNorm when is_layer_norm.
 */
static int module_build(const struct ctx *c, const struct pt_value *d, int dim, int layer_norm,
                        int has_act, int activate_output, struct hn_module *m)
{
    if (d->kind != PT_DICT)
        return err_set(c->e, ERR_INVALID, "'%s': a width-%d module is a %s, not a state dict",
                       c->what, dim, pt_kind_name(d));
    const struct pt_seq *s = &d->u.seq;
    char **names = xcalloc(s->n / 2 + 1, sizeof *names);
    int n = 0, rc = 0, width = dim;
    for (size_t i = 0; i + 1 < s->n; i += 2) {
        const struct pt_value *k = s->items[i];
        if (k->kind == PT_STR && k->u.str.len > 7 &&
            memcmp(k->u.str.ptr + k->u.str.len - 7, ".weight", 7) == 0)
            names[n++] = xstrndup(k->u.str.ptr, k->u.str.len - 7);
    }
    m->v = xcalloc((size_t)n + 1, sizeof *m->v);
    for (int i = 0; i < n && rc == 0; i++) {
        int last = i == n - 1;
        char wn[256], bn[256];
        snprintf(wn, sizeof wn, "%s.weight", names[i]);
        snprintf(bn, sizeof bn, "%s.bias", names[i]);
        const struct pt_value *wv = NULL;
        for (size_t j = 0; j + 1 < s->n; j += 2)
            if (str_is(s->items[j], wn))
                wv = s->items[j + 1];
        if (!wv || wv->kind != PT_TENSOR || wv->u.t.ndim != 2) {
            rc = err_set(c->e, ERR_INVALID, "'%s': width-%d module entry '%s' is not a Linear "
                         "weight [out, in]", c->what, dim, wn);
            break;
        }
        struct hn_layer *L = &m->v[m->n];
        L->kind = HN_LINEAR;
        L->in = width;
        L->out = (int)wv->u.t.shape[0];
        L->act = has_act && (!last || activate_output);
        int64_t ws[2] = {L->out, L->in}, bs[1] = {L->out};
        if (!(L->w = read_tensor(c, d, wn, 2, ws)) || !(L->b = read_tensor(c, d, bn, 1, bs))) {
            rc = c->e->code ? c->e->code : ERR_INVALID;
            m->n++;
            break;
        }
        m->n++;
        width = L->out;
        if (layer_norm) {
            if (++i >= n) {
                rc = err_set(c->e, ERR_INVALID, "'%s': width-%d module: the Linear '%s' has no "
                             "LayerNorm after it (is_layer_norm)", c->what, dim, names[i - 1]);
                break;
            }
            struct hn_layer *N = &m->v[m->n];
            N->kind = HN_NORM;
            N->in = N->out = width;
            snprintf(wn, sizeof wn, "%s.weight", names[i]);
            snprintf(bn, sizeof bn, "%s.bias", names[i]);
            int64_t ns[1] = {width};
            N->w = read_tensor(c, d, wn, 1, ns);
            N->b = N->w ? read_tensor(c, d, bn, 1, ns) : NULL;
            m->n++;
            if (!N->b)
                rc = c->e->code ? c->e->code : ERR_INVALID;
        }
    }
    if (rc == 0 && width != dim)
        rc = err_set(c->e, ERR_INVALID, "'%s': the width-%d module ends at width %d", c->what,
                     dim, width);
    if (rc == 0 && n == 0)
        rc = err_set(c->e, ERR_INVALID, "'%s': the width-%d module has no Linear", c->what, dim);
    for (int i = 0; i < n; i++)
        xfree(names[i]);
    xfree(names);
    return rc;
}

static int cmp_pair(const void *a, const void *b)
{
    return ((const struct hn_pair *)a)->dim - ((const struct hn_pair *)b)->dim;
}

static int build(const struct ctx *c, const struct pt_value *root, struct hypernetwork *h)
{
    if (root->kind != PT_DICT)
        return err_set(c->e, ERR_INVALID, "'%s' holds a %s, not a hypernetwork dict", c->what,
                       pt_kind_name(root));
    const struct pt_value *af = pt_dict_get(root, "activation_func");
    h->act = HN_ACT_LINEAR; /* sd.get('activation_func', 'linear') */
    if (af) {
        int found = -1;
        for (int i = 0; i < (int)(sizeof act_names / sizeof act_names[0]); i++)
            if (str_is(af, act_names[i]))
                found = i;
        if (found < 0) {
            err_set(c->e, 0,
                    "'%s': unsupported hypernetwork activation_func '%.*s' (ComfyUI takes "
                    "linear, relu, leakyrelu, elu, swish, tanh, sigmoid, softsign, mish, and "
                    "patches nothing with another)",
                    c->what, af->kind == PT_STR ? (int)af->u.str.len : 1,
                    af->kind == PT_STR ? af->u.str.ptr : "?");
            return HN_NOTHING;
        }
        h->act = (enum hn_act)found;
    }
    int ln = opt_bool(root, "is_layer_norm"), act_out = opt_bool(root, "activate_output");
    const struct pt_seq *s = &root->u.seq;
    h->pairs = xcalloc(s->n / 2 + 1, sizeof *h->pairs);
    for (size_t i = 0; i + 1 < s->n; i += 2) {
        const struct pt_value *k = s->items[i], *v = s->items[i + 1];
        if (k->kind != PT_INT) /* int(d) fails: an option */
            continue;
        if (k->u.i <= 0 || k->u.i > 65536)
            return err_set(c->e, ERR_INVALID, "'%s': width key %lld", c->what, (long long)k->u.i);
        if ((v->kind != PT_LIST && v->kind != PT_TUPLE) || v->u.seq.n < 2)
            return err_set(c->e, ERR_INVALID,
                           "'%s': width %lld holds a %s, not a list of two state dicts", c->what,
                           (long long)k->u.i, pt_kind_name(v));
        struct hn_pair *p = &h->pairs[h->n++];
        p->dim = (int)k->u.i;
        for (int w = 0; w < 2; w++) {
            int rc = module_build(c, v->u.seq.items[w], p->dim, ln, h->act != HN_ACT_LINEAR,
                                  act_out, &p->m[w]);
            if (rc < 0)
                return rc;
        }
    }
    if (h->n == 0)
        return err_set(c->e, ERR_INVALID, "'%s' holds no width-keyed modules (not a "
                       "hypernetwork)", c->what);
    qsort(h->pairs, (size_t)h->n, sizeof *h->pairs, cmp_pair);
    h->dims = xcalloc((size_t)h->n, sizeof *h->dims);
    for (int i = 0; i < h->n; i++)
        h->dims[i] = h->pairs[i].dim;
    return 0;
}

int hypernetwork_load(const char *path, struct hypernetwork **out, struct err *e)
{
    struct buf b;
    buf_init(&b);
    *out = NULL;
    if (buf_read_file(&b, path) < 0) {
        buf_release(&b);
        return err_set(e, ERR_NOT_FOUND, "cannot read hypernetwork '%s'", path);
    }
    const uint8_t *bytes = (const uint8_t *)b.ptr;
    int rc;
    enum pt_format fmt = pt_sniff(bytes, b.len);
    if (fmt != PT_FORMAT_ZIP) {
        /* A safetensors file: an 8-byte header length, then the JSON header. */
        if (b.len > 9 && bytes[8] == '{')
            err_set(e, 0, "'%s' is a .safetensors file: it holds no width-keyed modules, so "
                    "ComfyUI patches nothing with it", path);
        rc = b.len > 9 && bytes[8] == '{' ? 0
             : fmt == PT_FORMAT_PICKLE    ? pt_refuse_pickle(path, e)
                                          : err_set(e, ERR_INVALID,
                                                    "'%s' is not a hypernetwork (neither a torch "
                                                    ".pt zip nor a .safetensors file)",
                                                    path);
        buf_release(&b);
        return rc;
    }
    struct pt_doc *doc = NULL;
    struct st_file f = {.path = (char *)path, .data = bytes, .data_size = b.len};
    struct ctx c = {.f = &f, .what = path, .e = e};
    struct hypernetwork *h = xcalloc(1, sizeof *h);
    atomic_init(&h->refs, 1);
    rc = pt_load_doc(bytes, b.len, path, &doc, e);
    if (rc == 0)
        rc = build(&c, pt_doc_root(doc), h);
    pt_doc_free(doc);
    buf_release(&b); /* every weight was converted into owned floats */
    if (rc < 0 || h->n == 0)
        hypernetwork_free(h); /* h->n 0: an unknown activation, said in e */
    else
        *out = h;
    return rc == HN_NOTHING ? 0 : rc;
}

struct hypernetwork *hypernetwork_ref(struct hypernetwork *h)
{
    atomic_fetch_add(&h->refs, 1);
    return h;
}

void hypernetwork_free(struct hypernetwork *h)
{
    if (!h || atomic_fetch_sub(&h->refs, 1) != 1)
        return;
    for (int i = 0; i < h->n; i++)
        for (int w = 0; w < 2; w++)
            module_release(&h->pairs[i].m[w]);
    xfree(h->pairs);
    xfree(h->dims);
    xfree(h);
}

const int *hypernetwork_dims(const struct hypernetwork *h, int *n)
{
    *n = h->n;
    return h->dims;
}

enum hn_act hypernetwork_activation(const struct hypernetwork *h)
{
    return h->act;
}

/* torch's activation modules, in float32 as they compute. */
static float act_f(enum hn_act a, float x)
{
    switch (a) {
    case HN_ACT_RELU: return x > 0 ? x : 0;
    case HN_ACT_LEAKYRELU: return x > 0 ? x : 0.01f * x;
    case HN_ACT_ELU: return x > 0 ? x : expm1f(x);
    case HN_ACT_SWISH: return x * fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f;
    case HN_ACT_TANH: return tanhf(x);
    case HN_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case HN_ACT_SOFTSIGN: return x / (1.0f + fabsf(x));
    case HN_ACT_MISH: return x * tanhf(x > 20.0f ? x : log1pf(expf(x))); /* softplus threshold 20 */
    default: return x;
    }
}

/* One row through a module: y [dim] from x [dim]; t0, t1 scratch of the widest layer. */
static void module_row(const struct hn_module *m, enum hn_act act, const float *x, float *y,
                       float *t0, float *t1)
{
    const float *in = x;
    float *cur = t0;
    for (int l = 0; l < m->n; l++) {
        const struct hn_layer *L = &m->v[l];
        if (L->kind == HN_LINEAR) {
            for (int o = 0; o < L->out; o++) {
                float acc = L->b[o];
                const float *w = L->w + (size_t)o * L->in;
                for (int i = 0; i < L->in; i++)
                    acc += w[i] * in[i];
                cur[o] = L->act ? act_f(act, acc) : acc;
            }
        } else {
            double mean = 0, var = 0;
            for (int i = 0; i < L->in; i++)
                mean += in[i];
            mean /= L->in;
            for (int i = 0; i < L->in; i++)
                var += (in[i] - mean) * (in[i] - mean);
            float inv = (float)(1.0 / sqrt(var / L->in + 1e-5)); /* LayerNorm's eps */
            for (int i = 0; i < L->in; i++)
                cur[i] = (float)(in[i] - mean) * inv * L->w[i] + L->b[i];
        }
        in = cur;
        cur = cur == t0 ? t1 : t0;
    }
    memcpy(y, in, (size_t)m->v[m->n - 1].out * sizeof(float));
}

int hypernetwork_apply(const struct hypernetwork *h, int dim, int which, float strength,
                       const float *x, int64_t rows, float *out)
{
    const struct hn_pair *p = NULL;
    for (int i = 0; i < h->n; i++)
        if (h->pairs[i].dim == dim)
            p = &h->pairs[i];
    if (!p || which < 0 || which > 1)
        return 0;
    const struct hn_module *m = &p->m[which];
    int wide = dim;
    for (int l = 0; l < m->n; l++)
        wide = m->v[l].out > wide ? m->v[l].out : wide;
    float *t0 = xmalloc((size_t)wide * 3 * sizeof(float)), *t1 = t0 + wide, *y = t1 + wide;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim;
        module_row(m, h->act, xr, y, t0, t1);
        for (int i = 0; i < dim; i++)
            out[(size_t)r * dim + i] = xr[i] + y[i] * strength;
    }
    xfree(t0);
    return 1;
}
