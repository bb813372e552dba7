/*
 * The CLIP text transformer's forward pass (sd15.md §2.10-2.13; OpenCLIP bigG/H with
 * the knobs of sdxl.md §4). See text_encoder.h.
 */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "nn.h"
#include "text_encoder.h"
#include "family.h"

/* q, k, v weights of layer l: three projections (HF), or row blocks of OpenCLIP's fused
 * in_proj (the same products; sdxl.md §1.3). Views in v[6] are the caller's to free. */
static int qkv_weights(struct nn_w *w, const struct text_arch *a, int l,
                       const struct tensor *out[6], struct tensor *views[6], struct err *e)
{
    static const char *const n[3] = {"q_proj", "k_proj", "v_proj"};
    const struct tensor *iw, *ib;
    int rc = 0;
    if (a->naming != TEXT_NAMING_OPENCLIP) {
        for (int i = 0; i < 3; i++) {
            NN_W(out[2 * i], w, "encoder.layers.%d.self_attn.%s.weight", l, n[i]);
            NN_W(out[2 * i + 1], w, "encoder.layers.%d.self_attn.%s.bias", l, n[i]);
        }
        return 0;
    }
    NN_W(iw, w, "encoder.layers.%d.self_attn.in_proj.weight", l);
    NN_W(ib, w, "encoder.layers.%d.self_attn.in_proj.bias", l);
    for (int i = 0; i < 3; i++) {
        NN_TRY(tensor_slice(iw, 0, (int64_t)i * a->width, a->width, &views[2 * i], e));
        NN_TRY(tensor_slice(ib, 0, (int64_t)i * a->width, a->width, &views[2 * i + 1], e));
        out[2 * i] = views[2 * i];
        out[2 * i + 1] = views[2 * i + 1];
    }
fail:
    return rc;
}

/* One pre-LN encoder layer, in place on x [S, 77, D]. */
static int clip_layer(struct nn_w *w, const struct text_arch *c, int l, struct tensor *x,
                      struct err *e)
{
    struct dev *d = tensor_dev(x);
    int64_t S = x->shape[0], T = x->shape[1], D = x->shape[2];
    const struct tensor *l1w, *l1b, *qkv[6], *ow, *ob, *l2w, *l2b, *f1w, *f1b, *f2w, *f2b;
    struct tensor *h = NULL, *q = NULL, *k = NULL, *v = NULL, *a = NULL, *f = NULL;
    struct tensor *views[6] = {0};
    int rc;
    const char *P = "encoder.layers";
    NN_W(l1w, w, "%s.%d.layer_norm1.weight", P, l);
    NN_W(l1b, w, "%s.%d.layer_norm1.bias", P, l);
    NN_TRY(qkv_weights(w, c, l, qkv, views, e));
    NN_W(ow, w, "%s.%d.self_attn.out_proj.weight", P, l);
    NN_W(ob, w, "%s.%d.self_attn.out_proj.bias", P, l);
    NN_W(l2w, w, "%s.%d.layer_norm2.weight", P, l);
    NN_W(l2b, w, "%s.%d.layer_norm2.bias", P, l);
    NN_W(f1w, w, "%s.%d.mlp.fc1.weight", P, l);
    NN_W(f1b, w, "%s.%d.mlp.fc1.bias", P, l);
    NN_W(f2w, w, "%s.%d.mlp.fc2.weight", P, l);
    NN_W(f2b, w, "%s.%d.mlp.fc2.bias", P, l);
    NN_TRY(nn__new(d, &h, e, 3, S, T, D));
    NN_TRY(tensor_layer_norm(h, x, l1w, l1b, 1e-5f, e));
    NN_TRY(nn__new(d, &q, e, 3, S, T, D));
    NN_TRY(nn__new(d, &k, e, 3, S, T, D));
    NN_TRY(nn__new(d, &v, e, 3, S, T, D));
    NN_TRY(tensor_linear(q, h, qkv[0], qkv[1], e));
    NN_TRY(tensor_linear(k, h, qkv[2], qkv[3], e));
    NN_TRY(tensor_linear(v, h, qkv[4], qkv[5], e));
    NN_TRY(nn__new(d, &a, e, 3, S, T, D));
    NN_TRY(tensor_attention(a, q, k, v, c->heads, 0.0f, TENSOR_ATTN_CAUSAL, e));
    NN_TRY(tensor_linear(h, a, ow, ob, e));
    NN_TRY(tensor_add(x, x, h, e));
    NN_TRY(tensor_layer_norm(h, x, l2w, l2b, 1e-5f, e));
    NN_TRY(nn__new(d, &f, e, 3, S, T, (int64_t)f1w->shape[0]));
    NN_TRY(tensor_linear(f, h, f1w, f1b, e));
    NN_TRY(c->act == TEXT_ACT_GELU ? tensor_gelu(f, f, e) : tensor_quick_gelu(f, f, e));
    NN_TRY(tensor_linear(h, f, f2w, f2b, e));
    NN_TRY(tensor_add(x, x, h, e));
fail:
    tensor_free(h);
    tensor_free(q);
    tensor_free(k);
    tensor_free(v);
    tensor_free(a);
    tensor_free(f);
    for (int i = 0; i < 6; i++)
        tensor_free(views[i]);
    return rc;
}

/*
 * The pooled vector (§2.13): chunk 0's row of `hl` (the final-LN output of the last
 * layer, host copy) at its first end token, times text_projection P (pooled . P) when
 * the arch has one (sdxl.md §4.3). P is fetched from the held final layer.
 */
static int pooled_vector(struct nn_w *w, const struct text_arch *a, const struct clip_tokens *tk,
                         const float *hl, float **out, struct err *e)
{
    int64_t D = a->width, T = CLIP_CHUNK_LEN;
    int pos = 0, rc = 0;
    for (int j = 0; j < T; j++)
        if (tk->ids[j] == CLIP_TOKEN_EOS) {
            pos = j;
            break;
        }
    const float *row = hl + (size_t)pos * D;
    if (a->proj_dim <= 0) {
        *out = xmalloc((size_t)D * sizeof(float));
        memcpy(*out, row, (size_t)D * sizeof(float));
        return 0;
    }
    const struct tensor *pw;
    int64_t N = a->proj_dim;
    float *p = xmalloc((size_t)(D * N) * sizeof(float)), *o = xcalloc((size_t)N, sizeof(float));
    /* OpenCLIP stores P [D, N]; a Hugging Face file its Linear weight P^T [N, D]. Both
     * sum over k in the same order, so the two give the same bits for the same P. */
    int hf = a->naming == TEXT_NAMING_HF;
    NN_W(pw, w, "%s", hf ? "text_projection.weight" : "text_projection");
    NN_TRY(tensor_read_f32(pw, p, D * N, e));
    for (int64_t k = 0; k < D; k++) /* accumulate over k in order */
        for (int64_t j = 0; j < N; j++)
            o[j] += row[k] * (hf ? p[j * D + k] : p[k * N + j]);
    *out = o;
    o = NULL;
fail:
    xfree(p);
    xfree(o);
    return rc;
}

int text_encode(struct patcher *clip, const struct text_arch *cfg, const char *prefix,
                const struct clip_tokens *tk, const struct text_encode_opts *opts, float **cond_out,
                float **pooled_out, struct model_probe *probe, struct err *e)
{
    struct dev *d = patcher_device(clip);
    *cond_out = NULL;
    if (pooled_out)
        *pooled_out = NULL;
    if (!d)
        return err_set(e, ERR_INVALID, "clip: model is not loaded (call mm_load_models first)");
    if (tk->n_chunks < 1)
        return err_set(e, ERR_INVALID, "clip: no tokens");
    const int64_t T = CLIP_CHUNK_LEN, D = cfg->width, L = cfg->layers;
    const int clip_skip = opts->layer;
    const int n = tk->n_chunks, S = n + (tk->has_weights ? 1 : 0);
    int32_t *ids = xmalloc((size_t)S * T * sizeof(int32_t));
    /* OpenCLIP pads with id 0 (sdxl.md §4.1): the padding only, not end tokens. */
    clip_tokens_padded_ids(tk, opts->pad_zero ? 0 : CLIP_TOKEN_PAD, ids);
    if (tk->has_weights) { /* the "empty" sequence of §2.8 */
        ids[n * T] = CLIP_TOKEN_BOS;
        for (int64_t j = 1; j < T; j++)
            ids[n * T + j] = opts->pad_zero && j > 1 ? 0 : CLIP_TOKEN_EOS;
    }
    /* Layer to keep: -1/0 -> last (after final LN); -k (k <= L) -> output of layer L-k+1,
     * after final LN when opts->norm_hidden (SD1.x) or as it is (SDXL). */
    int in_range = clip_skip < 0 && -clip_skip <= L;
    int keep = in_range ? (int)(L + clip_skip + 1) : (int)L;
    /* A hidden state to keep apart from `last`: any but the last layer, and the last one
     * too when it is selected without the final norm (SDXL's CLIPSetLastLayer(-1)). */
    int keep_raw = keep != L || (in_range && !opts->norm_hidden);
    struct nn_w w;
    nn__w_init(&w, clip, prefix, e);
    struct tensor *x = NULL, *pe = NULL, *sel = NULL, *last = NULL;
    float *hs = NULL, *hl = NULL;
    int rc;
    const struct tensor *tok_w, *pos_w, *fw, *fb;
    NN_W(tok_w, &w, "embeddings.token_embedding.weight");
    NN_W(pos_w, &w, "embeddings.position_embedding.weight");
    if (tk->n_embeds && tk->embed_width != D) {
        rc = err_set(e, ERR_INVALID,
                     "clip: textual-inversion embedding has width %d but the text encoder %lld",
                     tk->embed_width, (long long)D);
        goto fail;
    }
    /* Embedding vectors replace the token embedding of their positions (ComfyUI inserts
     * them before the position embedding is added). Gather id 0 there first. */
    int32_t *gids = xmalloc((size_t)S * T * sizeof(int32_t));
    for (int64_t i = 0; i < S * T; i++)
        gids[i] = ids[i] >= CLIP_EMBED_ID_BASE ? 0 : ids[i];
    rc = nn__new(d, &x, e, 3, (int64_t)S, T, D);
    if (rc == 0)
        rc = tensor_embedding(x, tok_w, gids, (int64_t)S * T, e);
    xfree(gids);
    if (rc < 0)
        goto fail;
    for (int64_t i = 0; i < S * T; i++) {
        if (ids[i] < CLIP_EMBED_ID_BASE)
            continue;
        int k = ids[i] - CLIP_EMBED_ID_BASE;
        struct tensor *row = NULL;
        rc = k < tk->n_embeds ? tensor_view(x, 1, (const int64_t[]){D}, (const int64_t[]){1},
                                            x->offset + i * D, &row, e)
                              : err_set(e, ERR_INVALID, "clip: embedding token %d out of range", k);
        if (rc == 0)
            rc = tensor_write_f32(row, tk->embeds + (size_t)k * D, D, e);
        tensor_free(row);
        if (rc < 0)
            goto fail;
    }
    NN_TRY(tensor_slice(pos_w, 0, 0, T, &pe, e));
    NN_TRY(tensor_add(x, x, pe, e));
    tensor_free(pe);
    pe = NULL;
    nn__probe(probe, "embeddings", x);
    for (int l = 0; l < L; l++) {
        NN_TRY(clip_layer(&w, cfg, l, x, e));
        if (l == 0)
            nn__probe(probe, "layer.0", x);
        if (l + 1 == keep && keep_raw) {
            NN_TRY(nn__new(d, &sel, e, 3, (int64_t)S, T, D));
            NN_TRY(tensor_copy(sel, x, e));
        }
    }
    NN_W(fw, &w, "final_layer_norm.weight");
    NN_W(fb, &w, "final_layer_norm.bias");
    NN_TRY(nn__new(d, &last, e, 3, (int64_t)S, T, D));
    NN_TRY(tensor_layer_norm(last, x, fw, fb, 1e-5f, e));
    if (sel && opts->norm_hidden)
        NN_TRY(tensor_layer_norm(sel, sel, fw, fb, 1e-5f, e));
    nn__probe(probe, "last", last);
    if (sel)
        nn__probe(probe, "selected", sel);

    size_t per = (size_t)T * D;
    hs = xmalloc((size_t)S * per * sizeof(float));
    NN_TRY(tensor_read_f32(sel ? sel : last, hs, (int64_t)(S * per), e));
    if (pooled_out) {
        hl = xmalloc((size_t)S * per * sizeof(float));
        NN_TRY(tensor_read_f32(last, hl, (int64_t)(S * per), e));
        NN_TRY(pooled_vector(&w, cfg, tk, hl, pooled_out, e));
    }
    nn__w_release(&w);
    if (tk->has_weights) { /* §2.12: out = (out - E) * w + E, per position */
        const float *E = hs + (size_t)n * per;
        for (int c = 0; c < n; c++)
            for (int64_t j = 0; j < T; j++) {
                float wt = tk->weights[c * T + j];
                if (wt == 1.0f)
                    continue;
                float *z = hs + (size_t)c * per + (size_t)j * D;
                for (int64_t f = 0; f < D; f++)
                    z[f] = (z[f] - E[j * D + f]) * wt + E[j * D + f];
            }
    }
    *cond_out = hs;
    hs = NULL;
fail:
    nn__w_release(&w);
    xfree(ids);
    xfree(hs);
    xfree(hl);
    tensor_free(x);
    tensor_free(pe);
    tensor_free(sel);
    tensor_free(last);
    return rc;
}

size_t text_plan_bytes(const struct text_arch *c, int n_seq)
{
    /* x, selected, last, h, q, k, v, attention out, and the MLP (4 D wide) per token. */
    size_t tok = (size_t)n_seq * CLIP_CHUNK_LEN;
    return tok * (size_t)(8 * c->width + c->mlp) * 4 + ((size_t)16 << 20);
}
