/*
 * Deterministic random-weight SD1.5 checkpoints (see ckpt_gen.h).
 */
#include "ckpt_gen.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <stdlib.h>

#include "alloc.h"
#include "checkpoint.h"
#include "checkpoint_save.h"
#include "controlnet.h"
#include "gligen.h"
#include "t2i_adapter.h"
#include "strhash.h"
#include "family.h"

void ckpt_gen_opts_default(struct ckpt_gen_opts *o)
{
    memset(o, 0, sizeof(*o));
    sd15_config_tiny(&o->cfg);
    o->dtype = ST_DTYPE_F32;
    o->seed = 42;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}


/* Uniform in (0, 1]: never 0, so log() is finite. */
static double unif(uint64_t *s)
{
    return ((double)(splitmix64(s) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

void ckpt_gen_fill(uint64_t seed, const char *name, enum model_init init, int ndim,
                   const int64_t *shape, float *dst, uint64_t n)
{
    uint64_t s = seed ^ strhash(name);
    double fan_in = 1;
    for (int i = 1; i < ndim; i++)
        fan_in *= (double)shape[i];
    double scale = 1.0, shift = 0.0;
    switch (init) {
    case MODEL_INIT_WEIGHT: scale = 1.0 / sqrt(fan_in); break;
    case MODEL_INIT_NORM: scale = 0.1; shift = 1.0; break;
    case MODEL_INIT_BIAS: scale = 0.1; break;
    case MODEL_INIT_EMBED: scale = 1.0; break;
    }
    for (uint64_t i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(unif(&s))), th = 6.283185307179586 * unif(&s);
        dst[i] = (float)(shift + scale * r * cos(th));
        if (i + 1 < n)
            dst[i + 1] = (float)(shift + scale * r * sin(th));
    }
}

/* ---- the tensor list ------------------------------------------------------------------ */

enum fill_kind {
    FILL_RANDOM,  /* ckpt_gen_fill with `init` */
    FILL_ROWS,    /* rows [row0, row0 + shape[0]) of the random `src_shape` tensor */
    FILL_TRANSPOSE, /* the random 2-D `src_shape` tensor transposed */
    FILL_ARANGE,  /* 0, 1, 2, ... (position_ids) */
    FILL_CONST,   /* `value` everywhere */
};

struct gen_entry {
    char name[192];
    char seed_name[192]; /* the canonical name the values derive from */
    enum st_dtype dtype;
    enum model_init init;
    enum fill_kind fill;
    float value;
    int ndim;
    int64_t shape[4];
    int src_ndim;         /* FILL_ROWS, FILL_TRANSPOSE: the tensor the values come from */
    int64_t src_shape[4];
    int64_t row0;
};

struct gen_list {
    struct gen_entry *v;
    size_t n, cap;
    const struct ckpt_gen_opts *o;
};

static struct gen_entry *push(struct gen_list *l)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1024;
        l->v = xrealloc(l->v, l->cap * sizeof(*l->v));
    }
    struct gen_entry *g = &l->v[l->n++];
    memset(g, 0, sizeof(*g));
    return g;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int is_1x1_linear_like(const char *name)
{
    return ends_with(name, "proj_in.weight") || ends_with(name, "proj_out.weight") ||
           ends_with(name, "attn_1.q.weight") || ends_with(name, "attn_1.k.weight") ||
           ends_with(name, "attn_1.v.weight");
}

/* A random tensor `name` of shape k's drawn as `seed_name` (the checkpoint's name). */
static struct gen_entry *push_random(struct gen_list *l, const struct model_key *k,
                                     const char *name, const char *seed_name)
{
    static struct gen_entry dropped; /* written to and never listed */
    if (l->o->drop_tensor && strcmp(l->o->drop_tensor, name) == 0)
        return &dropped;
    struct gen_entry *g = push(l);
    snprintf(g->name, sizeof(g->name), "%s", name);
    snprintf(g->seed_name, sizeof(g->seed_name), "%s", seed_name);
    g->dtype = l->o->dtype;
    g->init = k->init;
    g->fill = FILL_RANDOM;
    g->ndim = g->src_ndim = k->ndim;
    memcpy(g->shape, k->shape, sizeof(g->shape));
    memcpy(g->src_shape, k->shape, sizeof(g->shape));
    return g;
}

/*
 * One tensor of a standalone text encoder (enum ckpt_gen_text): drawn as the checkpoint's
 * tensor (its written name with prefix is the seed name), written in the file's naming.
 */
static void text_file_key(struct gen_list *l, const struct model_key *k)
{
    const struct ckpt_gen_opts *o = l->o;
    if ((int)k->comp != MODEL_CLIP + o->text_slot)
        return;
    const struct text_arch *ta = &o->cfg.text[o->text_slot];
    const char *internal = k->name + k->rel;
    char ck[192], rel[160], name[192];
    text_name_to_file(ta->naming, internal, rel, sizeof(rel)); /* the checkpoint's naming */
    snprintf(ck, sizeof(ck), "%.*s%s", k->rel, k->name, rel);
    if (o->text_file == CKPT_GEN_TEXT_PREFIXED) {
        push_random(l, k, ck, ck);
        return;
    }
    if (o->text_file == CKPT_GEN_TEXT_OPENCLIP || ta->naming == TEXT_NAMING_HF) {
        if (o->text_file == CKPT_GEN_TEXT_OPENCLIP)
            snprintf(name, sizeof(name), "%s", rel);
        else
            snprintf(name, sizeof(name), "text_model.%s", internal);
        push_random(l, k, name, ck);
        return;
    }
    /* Hugging Face names of an OpenCLIP encoder. */
    int64_t d = ta->width;
    if (strstr(internal, ".self_attn.in_proj.")) {
        static const char *const qkv[3] = {"q_proj", "k_proj", "v_proj"};
        const char *tail = strstr(internal, ".self_attn.in_proj.") + strlen(".self_attn.in_proj.");
        int layer = atoi(internal + strlen("encoder.layers."));
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof(name), "text_model.encoder.layers.%d.self_attn.%s.%s", layer,
                     qkv[i], tail);
            struct gen_entry *g = push_random(l, k, name, ck);
            g->fill = FILL_ROWS;
            g->shape[0] = d;
            g->row0 = i * d;
        }
        return;
    }
    if (strcmp(internal, "text_projection") == 0) {
        struct gen_entry *g = push_random(l, k, "text_projection.weight", ck);
        g->fill = FILL_TRANSPOSE;
        g->shape[0] = k->shape[1];
        g->shape[1] = k->shape[0];
        return;
    }
    snprintf(name, sizeof(name), "text_model.%s", internal);
    push_random(l, k, name, ck);
}

static void on_key(void *user, const struct model_key *k)
{
    struct gen_list *l = user;
    const struct ckpt_gen_opts *o = l->o;
    if (k->comp == MODEL_CLIP && (o->flags & CKPT_GEN_OPENCLIP))
        return;
    if (k->comp == MODEL_VAE && (o->flags & CKPT_GEN_NO_VAE))
        return;
    if (k->comp == MODEL_CLIP && (o->flags & CKPT_GEN_NO_CLIP))
        return;
    if (k->comp != MODEL_VAE && (o->flags & CKPT_GEN_VAE_ONLY))
        return;
    if (o->drop_tensor && strcmp(o->drop_tensor, k->name) == 0)
        return;
    if (o->text_file) {
        text_file_key(l, k);
        return;
    }
    struct gen_entry *g = push(l);
    snprintf(g->seed_name, sizeof(g->seed_name), "%s", k->name);
    const struct text_arch *ta = k->comp >= MODEL_CLIP ? &o->cfg.text[k->comp - MODEL_CLIP] : NULL;
    if (ta && ta->naming != TEXT_NAMING_HF) { /* written in the file's naming (OpenCLIP) */
        char rel[160];
        text_name_to_file(ta->naming, k->name + k->rel, rel, sizeof(rel));
        snprintf(g->name, sizeof(g->name), "%.*s%s", k->rel, k->name, rel);
        snprintf(g->seed_name, sizeof(g->seed_name), "%s", g->name);
    } else if ((o->flags & CKPT_GEN_OLD_CLIP) && k->comp == MODEL_CLIP)
        snprintf(g->name, sizeof(g->name), "cond_stage_model.transformer.%s",
                 k->name + strlen(SD15_PREFIX_CLIP));
    else if (k->comp == MODEL_VAE && (o->flags & CKPT_GEN_VAE_DIFFUSERS))
        vae_name_to_diffusers(k->name + strlen(MODEL_PREFIX_VAE), g->name, sizeof(g->name));
    else if (k->comp == MODEL_VAE && (o->flags & CKPT_GEN_VAE_BARE))
        snprintf(g->name, sizeof(g->name), "%s", k->name + strlen(MODEL_PREFIX_VAE));
    else
        snprintf(g->name, sizeof(g->name), "%s", k->name);
    if (o->drop_tensor && strcmp(o->drop_tensor, g->name) == 0) { /* the written name */
        l->n--;
        return;
    }
    g->dtype = o->dtype;
    if ((o->flags & CKPT_GEN_EMBED_F16) && ends_with(k->name, "token_embedding.weight"))
        g->dtype = ST_DTYPE_F16;
    g->init = k->init;
    g->fill = FILL_RANDOM;
    g->ndim = k->ndim;
    memcpy(g->shape, k->shape, sizeof(g->shape));
    /* diffusers stores the VAE mid attention as linears (2-D). */
    int conv_2d = (o->flags & CKPT_GEN_CONV_2D) ||
                  (k->comp == MODEL_VAE && (o->flags & CKPT_GEN_VAE_DIFFUSERS));
    if (conv_2d && k->ndim == 4 && k->shape[2] == 1 && is_1x1_linear_like(k->name))
        g->ndim = 2;
}

static void add_special(struct gen_list *l, const char *name, enum st_dtype dt, enum fill_kind fk,
                        float value, int ndim, const int64_t *shape)
{
    struct gen_entry *g = push(l);
    snprintf(g->name, sizeof(g->name), "%s", name);
    snprintf(g->seed_name, sizeof(g->seed_name), "%s", name);
    g->dtype = dt;
    g->init = MODEL_INIT_BIAS;
    g->fill = fk;
    g->value = value;
    g->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        g->shape[i] = shape[i];
}

static void add_extras(struct gen_list *l)
{
    const struct ckpt_gen_opts *o = l->o;
    int64_t d = o->cfg.unet.model_ch;
    add_special(l, "model_ema.decay", ST_DTYPE_F32, FILL_CONST, 0.9999f, 0, NULL);
    add_special(l, "model_ema.num_updates", ST_DTYPE_I32, FILL_CONST, 0, 0, NULL);
    add_special(l, "model_ema.diffusion_modeltime_embed0weight", o->dtype, FILL_RANDOM, 0, 2,
                (const int64_t[]){4 * d, d});
    static const char *const bufs[] = {"betas", "alphas_cumprod", "alphas_cumprod_prev",
                                       "sqrt_alphas_cumprod", "posterior_variance"};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        add_special(l, bufs[i], ST_DTYPE_F32, FILL_CONST, 0.5f, 1, (const int64_t[]){1000});
    add_special(l, "cond_stage_model.transformer.text_model.embeddings.position_ids", ST_DTYPE_I64,
                FILL_ARANGE, 0, 2, (const int64_t[]){1, o->cfg.text[0].pos});
    add_special(l, "first_stage_model.loss.logvar", ST_DTYPE_F32, FILL_CONST, 0, 0, NULL);
}

/* The non-parameters real SDXL-family files carry (sdxl.md §1.1): a Hugging Face CLIP's
 * I64 position_ids, an OpenCLIP encoder's scalar logit_scale. */
static void add_text_buffers(struct gen_list *l)
{
    const struct model_config *c = &l->o->cfg;
    char n[192];
    for (int i = 0; i < 2; i++) {
        const char *p = model_prefix(c, MODEL_CLIP + i);
        if (!p || c->text[i].width <= 0)
            continue;
        if (c->text[i].naming == TEXT_NAMING_OPENCLIP) {
            snprintf(n, sizeof(n), "%slogit_scale", p);
            add_special(l, n, l->o->dtype, FILL_CONST, 4.6052f, 0, NULL);
        } else {
            snprintf(n, sizeof(n), "%sembeddings.position_ids", p);
            add_special(l, n, ST_DTYPE_I64, FILL_ARANGE, 0, 2,
                        (const int64_t[]){1, c->text[i].pos});
        }
    }
}

/* A Control-LoRA's trunk weight [o, i, ...] as name.up [o, r(, 1, 1)] and name.down
 * [r, i, ...]; 1 when k is such a weight (ControlLoraOps' Linear and Conv2d). */
static int cn_lora_pair(struct gen_list *l, const struct model_key *k)
{
    const char *rel = k->name + k->rel;
    size_t n = strlen(rel);
    int r = l->o->cn_lora_rank;
    if (k->ndim < 2 || n < 7 || strcmp(rel + n - 7, ".weight") != 0 ||
        !strncmp(rel, "input_hint_block.", 17) || !strncmp(rel, "zero_convs.", 11) ||
        !strncmp(rel, "middle_block_out.", 17))
        return 0;
    for (int half = 0; half < 2; half++) {
        char name[sizeof(((struct gen_entry *)0)->name)];
        snprintf(name, sizeof(name), "%.*s.%s", (int)(n - 7), rel, half ? "down" : "up");
        if (l->o->drop_tensor && strcmp(l->o->drop_tensor, name) == 0)
            continue;
        struct gen_entry *g = push(l);
        memcpy(g->name, name, sizeof(name));
        snprintf(g->seed_name, sizeof(g->seed_name), "control_lora.%.*s.%s", (int)(n - 7), rel,
                 half ? "down" : "up");
        g->dtype = l->o->dtype;
        g->init = MODEL_INIT_WEIGHT;
        g->fill = FILL_RANDOM;
        g->ndim = k->ndim;
        memcpy(g->shape, k->shape, sizeof(g->shape));
        if (half) {
            g->shape[0] = r;
        } else {
            g->shape[1] = r;
            for (int i = 2; i < k->ndim; i++)
                g->shape[i] = 1;
        }
    }
    return 1;
}

/* A ControlNet's tensor: control_model.<UNet-relative name>, or bare. */
static void on_cn_key(void *user, const struct model_key *k)
{
    struct gen_list *l = user;
    const struct ckpt_gen_opts *o = l->o;
    if (o->drop_tensor && strcmp(o->drop_tensor, k->name + k->rel) == 0)
        return;
    if (o->cn_lora_rank && cn_lora_pair(l, k))
        return;
    struct gen_entry *g = push(l);
    snprintf(g->seed_name, sizeof(g->seed_name), "control_model.%s", k->name + k->rel);
    if (!(o->flags & CKPT_GEN_CN_DIFFUSERS) ||
        controlnet_name_to_diffusers(k->name + k->rel, g->name, sizeof(g->name)) < 0)
        snprintf(g->name, sizeof(g->name), "%s%s",
                 (o->flags & (CKPT_GEN_CN_BARE | CKPT_GEN_CN_DIFFUSERS)) || o->cn_lora_rank
                     ? ""
                     : "control_model.",
                 k->name + k->rel);
    g->dtype = o->dtype;
    g->init = k->init;
    g->fill = FILL_RANDOM;
    g->ndim = k->ndim;
    memcpy(g->shape, k->shape, sizeof(g->shape));
}

/* A T2I-Adapter's tensor, in ComfyUI's or diffusers' naming. */
static void on_t2i_key(void *user, const struct model_key *k)
{
    struct gen_list *l = user;
    const struct ckpt_gen_opts *o = l->o;
    if (o->drop_tensor && strcmp(o->drop_tensor, k->name) == 0)
        return;
    struct gen_entry *g = push(l);
    snprintf(g->seed_name, sizeof(g->seed_name), "t2i_adapter.%s", k->name);
    if (!(o->flags & CKPT_GEN_CN_DIFFUSERS) ||
        t2i_adapter_name_to_diffusers(k->name, g->name, sizeof(g->name)) < 0)
        snprintf(g->name, sizeof(g->name), "%s", k->name);
    g->dtype = o->dtype;
    g->init = k->init;
    g->fill = FILL_RANDOM;
    g->ndim = k->ndim;
    memcpy(g->shape, k->shape, sizeof(g->shape));
}

static void build_t2i(const struct ckpt_gen_opts *o, struct gen_list *l)
{
    int c = o->cfg.unet.model_ch;
    struct t2i_arch a = {.kind = o->t2i == CKPT_GEN_T2I_LIGHT ? T2I_LIGHT : T2I_FULL,
                         .xl = o->t2i == CKPT_GEN_T2I_XL,
                         .hint_ch = o->t2i_hint_ch ? o->t2i_hint_ch : 3,
                         .unshuffle = o->t2i == CKPT_GEN_T2I_XL ? 16 : 8,
                         .channels = {c, 2 * c, 4 * c, 4 * c},
                         .nums_rb = o->t2i == CKPT_GEN_T2I_LIGHT ? 4 : 2,
                         .ksize = 1};
    t2i_adapter_layout(&a, on_t2i_key, l);
    if (o->extra_tensor)
        add_special(l, o->extra_tensor, o->dtype, FILL_RANDOM, 0, 1, (const int64_t[]){4});
}

/* A GLIGEN file's tensor: values depend on "gligen." + its name. */
static void on_gligen_key(void *user, const struct model_key *k)
{
    struct gen_list *l = user;
    const struct ckpt_gen_opts *o = l->o;
    if (o->drop_tensor && strcmp(o->drop_tensor, k->name) == 0)
        return;
    struct gen_entry *g = push(l);
    snprintf(g->name, sizeof(g->name), "%s", k->name);
    snprintf(g->seed_name, sizeof(g->seed_name), "gligen.%s", k->name);
    g->dtype = o->dtype;
    g->init = k->init;
    g->fill = FILL_RANDOM;
    g->ndim = k->ndim;
    memcpy(g->shape, k->shape, sizeof(g->shape));
}

static void build_gligen(const struct ckpt_gen_opts *o, struct gen_list *l)
{
    struct gligen_arch a;
    gligen_arch_for_unet(&o->cfg.unet, o->cfg.text[0].width,
                         o->gligen_key_dim ? o->gligen_key_dim : 768, &a);
    gligen_layout(&a, on_gligen_key, l);
    if (o->extra_tensor)
        add_special(l, o->extra_tensor, o->dtype, FILL_RANDOM, 0, 1, (const int64_t[]){4});
}

static void build_list(const struct ckpt_gen_opts *o, struct gen_list *l)
{
    l->o = o;
    if (o->gligen) {
        build_gligen(o, l);
        return;
    }
    if (o->t2i) {
        build_t2i(o, l);
        return;
    }
    if (o->flags & CKPT_GEN_CONTROLNET) {
        controlnet_layout_union(&o->cfg, 3, o->cn_union_types, on_cn_key, l);
        if (o->flags & CKPT_GEN_CN_DIFF)
            add_special(l, "difference", ST_DTYPE_F32, FILL_CONST, 0, 0, NULL);
        if (o->cn_lora_rank)
            add_special(l, "lora_controlnet", ST_DTYPE_F32, FILL_CONST, 0, 0, NULL);
        if (o->extra_tensor)
            add_special(l, o->extra_tensor, o->dtype, FILL_RANDOM, 0, 1, (const int64_t[]){4});
        return;
    }
    model_layout_build(&o->cfg, on_key, l);
    if (o->text_file)
        return;
    if (o->flags & CKPT_GEN_EXTRAS)
        add_extras(l);
    if (o->flags & CKPT_GEN_SDXL_MARK)
        add_special(l, "model.diffusion_model.label_emb.0.0.weight", o->dtype, FILL_RANDOM, 0, 2,
                    (const int64_t[]){4 * o->cfg.unet.model_ch, 2816});
    if (o->flags & CKPT_GEN_OPENCLIP) {
        int64_t w = o->cfg.text[0].width;
        add_special(l, "cond_stage_model.model.token_embedding.weight", o->dtype, FILL_RANDOM, 0, 2,
                    (const int64_t[]){o->cfg.text[0].vocab, w});
        add_special(l, "cond_stage_model.model.positional_embedding", o->dtype, FILL_RANDOM, 0, 2,
                    (const int64_t[]){o->cfg.text[0].pos, w});
        add_special(l, "cond_stage_model.model.ln_final.weight", o->dtype, FILL_RANDOM, 0, 1,
                    (const int64_t[]){w});
    }
    if (o->cfg.family != MODEL_FAMILY_SD15)
        add_text_buffers(l);
    const struct model_family *fam = model_family_get(o->cfg.family);
    if (fam && fam->vpred_key && o->cfg.prediction) /* empty marker tensors, as ComfyUI saves */
        add_special(l, fam->vpred_key, ST_DTYPE_F32, FILL_CONST, 0, 1, (const int64_t[]){0});
    if (fam && fam->vpred_key && o->cfg.zsnr)
        add_special(l, "ztsnr", ST_DTYPE_F32, FILL_CONST, 0, 1, (const int64_t[]){0});
    if (o->extra_tensor)
        add_special(l, o->extra_tensor, o->dtype, FILL_RANDOM, 0, 1, (const int64_t[]){4});
}

/* ---- writing ---------------------------------------------------------------------------- */

static void encode(const struct gen_entry *g, const float *src, uint64_t n, void *dst)
{
    switch (g->dtype) {
    case ST_DTYPE_F32: memcpy(dst, src, n * 4); break;
    case ST_DTYPE_F16:
        for (uint64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = st_f32_to_f16(src[i]);
        break;
    case ST_DTYPE_BF16:
        for (uint64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = st_f32_to_bf16(src[i]);
        break;
    case ST_DTYPE_I64:
        for (uint64_t i = 0; i < n; i++)
            ((int64_t *)dst)[i] = (int64_t)src[i];
        break;
    case ST_DTYPE_I32:
        for (uint64_t i = 0; i < n; i++)
            ((int32_t *)dst)[i] = (int32_t)src[i];
        break;
    default: PANIC("ckpt_gen: dtype %s not generated", st_dtype_name(g->dtype));
    }
}

/*
 * The tensor the family's v-prediction test reads (family.h, vpred_probe): drawn at the
 * std of the prediction cfg says, clear of ComfyUI's 0.09 threshold either way.
 */
static int is_vpred_probe(const struct model_config *c, const char *name)
{
    const struct model_family *f = model_family_get(c->family);
    size_t pl = strlen(MODEL_PREFIX_UNET);
    return f && f->vpred_probe && strncmp(name, MODEL_PREFIX_UNET, pl) == 0 &&
           strcmp(name + pl, f->vpred_probe) == 0;
}

static void writer_meta(void *user, const char *key, const char *val)
{
    st_writer_meta(user, key, val);
}

/* FILL_ROWS / FILL_TRANSPOSE: draw the source tensor, keep what g holds. */
static void fill_derived(const struct ckpt_gen_opts *o, const struct gen_entry *g, float *dst,
                         uint64_t n)
{
    uint64_t sn = 1;
    for (int i = 0; i < g->src_ndim; i++)
        sn *= (uint64_t)g->src_shape[i];
    float *src = xmalloc(sn * sizeof(float));
    ckpt_gen_fill(o->seed, g->seed_name, g->init, g->src_ndim, g->src_shape, src, sn);
    if (g->fill == FILL_ROWS) {
        uint64_t row = sn / (uint64_t)g->src_shape[0]; /* elements per row */
        memcpy(dst, src + (uint64_t)g->row0 * row, n * sizeof(float));
    } else {
        int64_t r = g->src_shape[0], c = g->src_shape[1];
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++)
                dst[j * r + i] = src[i * c + j];
    }
    xfree(src);
}

int ckpt_gen_write(const struct ckpt_gen_opts *o, const char *path, struct err *e)
{
    if (o->dtype != ST_DTYPE_F32 && o->dtype != ST_DTYPE_F16 && o->dtype != ST_DTYPE_BF16)
        return err_set(e, ERR_INVALID, "ckpt_gen: dtype must be F32, F16 or BF16");
    struct gen_list l = {0};
    build_list(o, &l);
    struct st_writer *w = st_writer_new();
    if (o->flags & CKPT_GEN_METADATA) {
        st_writer_meta(w, "format", "pt");
        st_writer_meta(w, "modelspec.title", "latentd random-weight test checkpoint");
    }
    /* Head counts are not stored in checkpoints; a shrunk config needs them said (the
     * same pairs CheckpointSave writes, so a saved test checkpoint reloads as itself). */
    if (o->text_file)
        model_text_file_meta(&o->cfg, (enum model_component)(MODEL_CLIP + o->text_slot),
                             writer_meta, w);
    else
        ckpt_save_heads_meta(&o->cfg, writer_meta, w);
    uint64_t max_n = 1;
    for (size_t i = 0; i < l.n; i++) {
        struct gen_entry *g = &l.v[i];
        st_writer_add(w, g->name, g->dtype, g->ndim, g->shape);
        uint64_t n = 1;
        for (int d = 0; d < g->ndim; d++)
            n *= (uint64_t)g->shape[d];
        if (n > max_n)
            max_n = n;
    }
    float *vals = xmalloc(max_n * sizeof(float));
    void *bytes = xmalloc(max_n * 8);
    int rc;
    if ((rc = st_writer_begin(w, path, e)) < 0)
        goto out;
    for (size_t i = 0; i < l.n; i++) {
        struct gen_entry *g = &l.v[i];
        uint64_t n = 1;
        for (int d = 0; d < g->ndim; d++)
            n *= (uint64_t)g->shape[d];
        switch (g->fill) {
        case FILL_RANDOM:
            ckpt_gen_fill(o->seed, g->seed_name, g->init, g->ndim, g->shape, vals, n);
            break;
        case FILL_ROWS:
        case FILL_TRANSPOSE:
            fill_derived(o, g, vals, n);
            break;
        case FILL_ARANGE:
            for (uint64_t j = 0; j < n; j++)
                vals[j] = (float)j;
            break;
        case FILL_CONST:
            for (uint64_t j = 0; j < n; j++)
                vals[j] = g->value;
            break;
        }
        if (g->fill == FILL_RANDOM && is_vpred_probe(&o->cfg, g->name))
            for (uint64_t j = 0; j < n; j++) /* std ~0.2 for v, ~0.02 for epsilon */
                vals[j] *= o->cfg.prediction ? 2.0f : 0.2f;
        if (o->nan_tensor && strcmp(o->nan_tensor, g->name) == 0 && n)
            vals[n / 2] = NAN;
        encode(g, vals, n, bytes);
        if ((rc = st_writer_write(w, bytes, n * st_dtype_size(g->dtype), e)) < 0)
            goto out;
    }
    rc = st_writer_finish(w, e);
out:
    xfree(vals);
    xfree(bytes);
    xfree(l.v);
    st_writer_free(w);
    return rc;
}

const char *ckpt_gen_bench_full_family(int family, const char *path, char *buf, size_t n,
                                       struct err *e)
{
    const int xl = family == MODEL_FAMILY_SDXL;
    if (!path) {
        const char *dir = getenv("LATENTD_BENCH_DIR");
        snprintf(buf, n, "%s/%s_full_random_f16.safetensors", dir ? dir : ".",
                 xl ? "sdxl" : "sd15");
        path = buf;
    }
    struct stat sb;
    if (stat(path, &sb) == 0)
        return path;
    printf("# generating the full-size random checkpoint '%s' (~%s GiB)\n", path,
           xl ? "6.5" : "2");
    fflush(stdout);
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    if (xl)
        sdxl_config_canonical(&o.cfg);
    else
        sd15_config_canonical(&o.cfg);
    o.dtype = ST_DTYPE_F16;
    return ckpt_gen_write(&o, path, e) < 0 ? NULL : path;
}

const char *ckpt_gen_bench_full(const char *path, char *buf, size_t n, struct err *e)
{
    return ckpt_gen_bench_full_family(MODEL_FAMILY_SD15, path, buf, n, e);
}
