/*
 * ComfyUI prompt syntax and 77-token chunking (sd15.md §2.6-2.8). See clip_tokenizer.h.
 */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "buf.h"
#include "clip_tokenizer.h"
#include "log.h"
#include "clip_tokenizer_impl.h"
#include "pynum.h"
#include "safetensors.h"

/* Escaped parentheses become these two-byte placeholders while parsing (ComfyUI
 * uses "\0\1" and "\0\2"; NUL cannot live in a C string, so a rarer control pair). */
#define ESC_CLOSE "\x1e\x01"
#define ESC_OPEN "\x1e\x02"

static char *replace_all(const char *s, const char *from, const char *to)
{
    struct buf b;
    buf_init(&b);
    size_t fl = strlen(from);
    for (const char *p = s; *p;) {
        if (strncmp(p, from, fl) == 0) {
            buf_adds(&b, to);
            p += fl;
        } else {
            buf_addc(&b, *p++);
        }
    }
    char *r = buf_detach(&b, NULL);
    buf_release(&b); /* detach re-initialises b */
    return r;
}

/* The parenthesis grouping pass, literally as ComfyUI's parse_parentheses. */
static void parse_parens(const char *s, char ***items, size_t *n)
{
    struct buf cur;
    buf_init(&cur);
    int depth = 0;
    *items = NULL;
    *n = 0;
#define EMIT(str)                                                                                  \
    do {                                                                                           \
        *items = xrealloc(*items, (*n + 1) * sizeof(char *));                                      \
        (*items)[(*n)++] = (str);                                                                  \
    } while (0)
    for (const char *p = s; *p; p++) {
        char c = *p;
        if (c == '(') {
            if (depth == 0) {
                if (cur.len)
                    EMIT(buf_detach(&cur, NULL));
                buf_reset(&cur);
                buf_addc(&cur, '(');
            } else {
                buf_addc(&cur, '(');
            }
            depth++;
        } else if (c == ')') {
            depth--;
            if (depth == 0) {
                buf_addc(&cur, ')');
                EMIT(buf_detach(&cur, NULL));
            } else {
                buf_addc(&cur, ')');
            }
        } else {
            buf_addc(&cur, c);
        }
    }
    if (cur.len)
        EMIT(buf_detach(&cur, NULL));
#undef EMIT
    buf_release(&cur);
}

struct segs {
    struct clip_segment *v;
    size_t n;
};

/*
 * Nesting deeper than this is kept as literal text at the enclosing weight. Each level
 * copies the text inside it, so unbounded recursion made "((((...a))))" quadratic in
 * time and memory: 20000 levels (a 40 KB prompt) took 5 s and 850 MB, 200000 levels
 * grew past 20 GB (found with tests/fuzz/fuzz_tokenizer). ComfyUI itself stops with a
 * RecursionError near 1000 levels; no real prompt comes close to this limit.
 */
#define PROMPT_MAX_DEPTH 128

static void token_weights(const char *s, double w, int depth, struct segs *out)
{
    char **items;
    size_t n;
    parse_parens(s, &items, &n);
    for (size_t i = 0; i < n; i++) {
        char *x = items[i];
        size_t len = strlen(x);
        if (len >= 2 && x[0] == '(' && x[len - 1] == ')' && depth < PROMPT_MAX_DEPTH) {
            char *inner = xstrndup(x + 1, len - 2);
            double weight = w * 1.1;
            char *colon = strrchr(inner, ':');
            double v;
            if (colon && colon > inner && pynum_parse_float(colon + 1, &v) == 0) {
                weight = v;
                *colon = 0;
            }
            token_weights(inner, weight, depth + 1, out);
            xfree(inner);
            xfree(x);
        } else {
            out->v = xrealloc(out->v, (out->n + 1) * sizeof(*out->v));
            out->v[out->n].text = x; /* ownership moves */
            out->v[out->n].weight = w;
            out->n++;
        }
    }
    xfree(items);
}

void clip_prompt_parse(const char *prompt, struct clip_segment **segs, size_t *n)
{
    char *a = replace_all(prompt, "\\)", ESC_CLOSE);
    char *b = replace_all(a, "\\(", ESC_OPEN);
    struct segs out = {0};
    token_weights(b, 1.0, 0, &out);
    xfree(a);
    xfree(b);
    for (size_t i = 0; i < out.n; i++) {
        char *u1 = replace_all(out.v[i].text, ESC_CLOSE, ")");
        char *u2 = replace_all(u1, ESC_OPEN, "(");
        xfree(u1);
        xfree(out.v[i].text);
        out.v[i].text = u2;
    }
    *segs = out.v;
    *n = out.n;
}

void clip_segments_free(struct clip_segment *segs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        xfree(segs[i].text);
    xfree(segs);
}

/* ---- groups and chunks -------------------------------------------------------------------- */

struct tok {
    int32_t id;
    double w;
};

/* A padding position while packing (ids are never negative): CLIP_TOKEN_PAD in ids,
 * 1 in pad, so that an encoder padding with another id leaves end tokens alone. */
#define PAD_MARK (-1)

struct chunks {
    struct tok *v; /* flat, 77 per chunk */
    size_t n;      /* tokens in all chunks, including the open one */
};

static void push(struct chunks *c, int32_t id, double w)
{
    if (c->n % 64 == 0)
        c->v = xrealloc(c->v, (c->n + 64) * sizeof(*c->v));
    c->v[c->n].id = id;
    c->v[c->n].w = w;
    c->n++;
}

/* Load embedding `name` from the tokenizer's directory: 0 and a new f32 array of n x width,
 * or -1 (not found / not usable; logged at debug level). */
static int load_embedding(struct clip_tokenizer *t, const char *name, float **vec, int *n,
                          int *width)
{
    const char *dir = clip__embedding_dir(t);
    if (!dir || !*name || strchr(name, '/') || name[0] == '.')
        return -1;
    static const char *const ext[] = {"", ".safetensors"};
    for (int i = 0; i < 2; i++) {
        struct buf path;
        buf_init(&path);
        buf_printf(&path, "%s/%s%s", dir, name, ext[i]);
        struct st_file *f = NULL;
        struct err e = {0};
        int rc = st_open(path.ptr, &f, &e);
        buf_release(&path);
        if (rc < 0) {
            log_debug("embedding '%s': %s", name, e.msg);
            continue;
        }
        const struct st_tensor *tt = st_find(f, "emb_params");
        if (!tt)
            tt = st_find(f, "clip_l");
        if (!tt && f->n_tensors == 1)
            tt = &f->tensors[0];
        if (tt && (tt->ndim == 1 || tt->ndim == 2) && st_tensor_numel(tt) > 0) {
            int64_t rows = tt->ndim == 2 ? tt->shape[0] : 1, cols = tt->shape[tt->ndim - 1];
            float *v = xmalloc(st_tensor_numel(tt) * sizeof(float));
            if (st_tensor_to_f32(f, tt, v, &e) == 0 && st_check(f, &e) == 0) {
                *vec = v;
                *n = (int)rows;
                *width = (int)cols;
                st_close(f);
                return 0;
            }
            xfree(v);
        }
        log_warn("embedding '%s': no usable tensor (emb_params, clip_l or a single [n, width])",
                 name);
        st_close(f);
        return -1;
    }
    return -1;
}

static void add_group(struct tok ***groups, size_t **glen, size_t *ng, const int32_t *ids,
                      size_t nid, double w)
{
    *groups = xrealloc(*groups, (*ng + 1) * sizeof(**groups));
    *glen = xrealloc(*glen, (*ng + 1) * sizeof(**glen));
    struct tok *g = xmalloc((nid ? nid : 1) * sizeof(*g));
    for (size_t i = 0; i < nid; i++) {
        g[i].id = ids[i];
        g[i].w = w;
    }
    (*groups)[*ng] = g;
    (*glen)[*ng] = nid;
    (*ng)++;
}

/* ' '.join(s.split()) into b. */
static void join_words(struct buf *b, const char *r)
{
    for (;;) {
        while (*r && strchr(" \t\n\r\f\v", *r))
            r++;
        if (!*r)
            break;
        size_t wl = strcspn(r, " \t\n\r\f\v");
        if (b->len)
            buf_addc(b, ' ');
        buf_add(b, r, wl);
        r += wl;
    }
}

/* Split a segment before each " embedding:" / "\nembedding:" (ComfyUI's re.split),
 * then tokenize each piece as its own group; embedding pieces become vector groups. */
static void segment_groups(struct clip_tokenizer *t, const char *text, double w,
                           struct tok ***groups, size_t **glen, size_t *ng, struct clip_tokens *out)
{
    static const char ident[] = "embedding:";
    const size_t il = sizeof(ident) - 1;
    const char *start = text;
    int first = 1;
    for (;;) {
        const char *sep = NULL;
        for (const char *p = start; *p; p++) {
            if ((p[0] == ' ' || p[0] == '\n') && strncmp(p + 1, ident, il) == 0) {
                sep = p;
                break;
            }
        }
        size_t len = sep ? (size_t)(sep - start) : strlen(start);
        struct buf piece;
        buf_init(&piece);
        if (!first)
            buf_adds(&piece, ident);
        buf_add(&piece, start, len);
        first = 0;
        if (piece.len) {
            const char *word = piece.ptr;
            char *leftover = NULL;
            if (strncmp(word, ident, il) == 0) {
                const char *name = word + il;
                while (*name == '\n')
                    name++;
                size_t nl = strcspn(name, " \t\n\r\f\v");
                char *nm = xstrndup(name, nl);
                struct buf rest;
                buf_init(&rest);
                join_words(&rest, name + nl);
                float *vec = NULL;
                int nv = 0, width = 0;
                int found = load_embedding(t, nm, &vec, &nv, &width) == 0;
                struct buf lo;
                buf_init(&lo);
                size_t stripped = nl;
                while (stripped && nm[stripped - 1] == ',')
                    stripped--;
                if (!found && stripped < nl) {
                    /* ComfyUI retries without trailing commas, which come back as text. */
                    char *sn = xstrndup(nm, stripped);
                    found = load_embedding(t, sn, &vec, &nv, &width) == 0;
                    xfree(sn);
                    buf_add(&lo, nm + stripped, nl - stripped);
                    buf_addc(&lo, ' ');
                }
                buf_adds(&lo, rest.ptr);
                if (found && (out->embed_width == 0 || out->embed_width == width)) {
                    out->embed_width = width;
                    out->embeds = xrealloc(out->embeds, (size_t)(out->n_embeds + nv) *
                                                            (size_t)width * sizeof(float));
                    memcpy(out->embeds + (size_t)out->n_embeds * width, vec,
                           (size_t)nv * width * sizeof(float));
                    int32_t *ids = xmalloc((size_t)nv * sizeof(int32_t));
                    for (int k = 0; k < nv; k++)
                        ids[k] = CLIP_EMBED_ID_BASE + out->n_embeds + k;
                    out->n_embeds += nv;
                    add_group(groups, glen, ng, ids, (size_t)nv, w);
                    xfree(ids);
                } else {
                    if (found)
                        log_warn("embedding:%s has width %d, unlike the other embeddings; ignoring",
                                 nm, width);
                    else
                        log_warn("warning, embedding:%s does not exist, ignoring", nm);
                    out->n_embedding_skipped++;
                }
                xfree(vec);
                leftover = buf_detach(&lo, NULL);
                buf_release(&lo);
                buf_release(&rest);
                xfree(nm);
                word = leftover;
            }
            if (*word) {
                int32_t *ids;
                size_t nid;
                clip_tokenizer_encode(t, word, &ids, &nid);
                add_group(groups, glen, ng, ids, nid, w);
                xfree(ids);
            }
            xfree(leftover);
        }
        buf_release(&piece);
        if (!sep)
            break;
        start = sep + 1 + il;
    }
}

void clip_tokenize_prompt(struct clip_tokenizer *t, const char *prompt, struct clip_tokens *out)
{
    memset(out, 0, sizeof(*out));
    struct clip_segment *segs;
    size_t nseg;
    clip_prompt_parse(prompt, &segs, &nseg);
    struct tok **groups = NULL;
    size_t *glen = NULL, ng = 0;
    for (size_t i = 0; i < nseg; i++)
        segment_groups(t, segs[i].text, segs[i].weight, &groups, &glen, &ng, out);
    clip_segments_free(segs, nseg);

    /* §2.7 packing. */
    const size_t L = CLIP_CHUNK_LEN;
    struct chunks c = {0};
    size_t open = 0; /* index where the open chunk starts */
    push(&c, CLIP_TOKEN_BOS, 1.0);
    for (size_t g = 0; g < ng; g++) {
        struct tok *G = groups[g];
        size_t len = glen[g];
        int large = len >= 8;
        while (len > 0) {
            size_t cur = c.n - open;
            if (len + cur > L - 1) {
                size_t remaining = L - cur - 1;
                if (large) {
                    for (size_t k = 0; k < remaining; k++)
                        push(&c, G[k].id, G[k].w);
                    push(&c, CLIP_TOKEN_EOS, 1.0);
                    G += remaining;
                    len -= remaining;
                } else {
                    push(&c, CLIP_TOKEN_EOS, 1.0);
                    for (size_t k = 0; k < remaining; k++)
                        push(&c, PAD_MARK, 1.0);
                }
                open = c.n;
                push(&c, CLIP_TOKEN_BOS, 1.0);
            } else {
                for (size_t k = 0; k < len; k++)
                    push(&c, G[k].id, G[k].w);
                len = 0;
            }
        }
        xfree(groups[g]);
    }
    xfree(groups);
    xfree(glen);
    push(&c, CLIP_TOKEN_EOS, 1.0);
    while ((c.n - open) < L)
        push(&c, PAD_MARK, 1.0);
    ASSERT(c.n % L == 0);
    out->n_chunks = (int)(c.n / L);
    out->ids = xmalloc(c.n * sizeof(int32_t));
    out->weights = xmalloc(c.n * sizeof(float));
    out->pad = xmalloc(c.n);
    for (size_t i = 0; i < c.n; i++) {
        out->pad[i] = c.v[i].id == PAD_MARK;
        out->ids[i] = out->pad[i] ? CLIP_TOKEN_PAD : c.v[i].id;
        out->weights[i] = (float)c.v[i].w;
        if (c.v[i].w != 1.0)
            out->has_weights = 1;
    }
    xfree(c.v);
}

void clip_tokens_pad_chunks(struct clip_tokens *tk, int n_chunks)
{
    if (n_chunks <= tk->n_chunks)
        return;
    size_t n = (size_t)n_chunks * CLIP_CHUNK_LEN;
    tk->ids = xrealloc(tk->ids, n * sizeof(*tk->ids));
    tk->weights = xrealloc(tk->weights, n * sizeof(*tk->weights));
    tk->pad = xrealloc(tk->pad, n);
    for (size_t i = (size_t)tk->n_chunks * CLIP_CHUNK_LEN; i < n; i++) {
        tk->ids[i] = i % CLIP_CHUNK_LEN == 0 ? CLIP_TOKEN_BOS : CLIP_TOKEN_EOS;
        tk->weights[i] = 1.0f;
        tk->pad[i] = i % CLIP_CHUNK_LEN > 1;
    }
    tk->n_chunks = n_chunks;
}

void clip_tokens_padded_ids(const struct clip_tokens *tk, int32_t pad_id, int32_t *out)
{
    size_t n = (size_t)tk->n_chunks * CLIP_CHUNK_LEN;
    for (size_t i = 0; i < n; i++)
        out[i] = tk->pad[i] ? pad_id : tk->ids[i];
}

void clip_tokens_release(struct clip_tokens *tk)
{
    xfree(tk->ids);
    xfree(tk->weights);
    xfree(tk->pad);
    xfree(tk->embeds);
    memset(tk, 0, sizeof(*tk));
}
