/*
 * SD1.5 checkpoint detection, validation and loading into patcher models
 * (see sd15_ckpt.h).
 */
#include "checkpoint.h"
#include "checkpoint_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "log.h"
#include "family.h"

/* ---- normalised name table ------------------------------------------------------------ */

struct nkey {
    char *name;                  /* owned: normalised full name */
    const struct st_tensor *t;   /* borrowed from the st_file */
    int used;
};

struct ntable {
    struct nkey *v;
    size_t n;
    int skipped;
};

static int starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* Names ComfyUI never reads for SD1.5 (sd15.md §1.2). */
static int is_ignored(const char *name)
{
    if (starts_with(name, "model_ema.") || starts_with(name, "first_stage_model.loss."))
        return 1;
    if (strcmp(name, SD15_PREFIX_CLIP "embeddings.position_ids") == 0 ||
        strcmp(name, SD15_PREFIX_CLIP "text_projection.weight") == 0)
        return 1;
    /* Everything outside the component prefixes (schedule buffers, ...), except the
     * other text encoders' prefixes, which detection must see. */
    if (!starts_with(name, "model.diffusion_model.") && !starts_with(name, "first_stage_model.") &&
        !starts_with(name, "cond_stage_model.") && !starts_with(name, "conditioner."))
        return 1;
    return 0;
}

static int cmp_nkey(const void *a, const void *b)
{
    return strcmp(((const struct nkey *)a)->name, ((const struct nkey *)b)->name);
}

static void ntable_build(const struct st_file *f, unsigned flags, struct ntable *nt)
{
    nt->v = xcalloc(f->n_tensors ? f->n_tensors : 1, sizeof(*nt->v));
    nt->n = 0;
    nt->skipped = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const char *name = f->tensors[i].name;
        char buf[512];
        /* §1.3: old CLIP naming without the text_model. level. */
        if (starts_with(name, "cond_stage_model.transformer.") &&
            !starts_with(name, "cond_stage_model.transformer.text_model.")) {
            snprintf(buf, sizeof(buf), "cond_stage_model.transformer.text_model.%s",
                     name + strlen("cond_stage_model.transformer."));
            name = buf;
        }
        /* A standalone VAE file: bare or diffusers names become first_stage_model.*. */
        char vbuf[512];
        if ((flags & MODEL_LOAD_VAE_FILE) && ckpt__vae_file_name(name, vbuf, sizeof(vbuf)))
            name = vbuf;
        if (is_ignored(name)) {
            nt->skipped++;
            continue;
        }
        nt->v[nt->n].name = xstrdup(name);
        nt->v[nt->n].t = &f->tensors[i];
        nt->n++;
    }
    qsort(nt->v, nt->n, sizeof(*nt->v), cmp_nkey);
}

static void ntable_release(struct ntable *nt)
{
    for (size_t i = 0; i < nt->n; i++)
        xfree(nt->v[i].name);
    xfree(nt->v);
    nt->v = NULL;
    nt->n = 0;
}

static struct nkey *ntable_find(const struct ntable *nt, const char *name)
{
    struct nkey key = {.name = (char *)name};
    return bsearch(&key, nt->v, nt->n, sizeof(*nt->v), cmp_nkey);
}

static const struct st_tensor *nfind(const struct ntable *nt, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static const struct st_tensor *nfind(const struct ntable *nt, const char *fmt, ...)
{
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    struct nkey *k = ntable_find(nt, name);
    return k ? k->t : NULL;
}

static size_t count_prefix(const struct ntable *nt, const char *prefix)
{
    size_t n = 0;
    for (size_t i = 0; i < nt->n; i++)
        n += starts_with(nt->v[i].name, prefix);
    return n;
}

/* ---- detection (sd15.md §1.5) ---------------------------------------------------------- */

static int unsupported(struct err *e, const char *path, const char *what)
{
    return err_set(e, ERR_UNSUPPORTED, "unsupported model type in '%s': %s (only SD1.x is supported)",
                   path, what);
}

static int meta_int(const struct st_file *f, const char *key, int dflt)
{
    const char *v = st_meta_get(f, key);
    if (!v)
        return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    return (*end || x <= 0 || x > 4096) ? dflt : (int)x;
}

static int detect_unet(const struct st_file *f, const struct ntable *nt, struct model_config *c,
                       struct err *e)
{
    const char *path = f->path;
    const char *P = MODEL_PREFIX_UNET;
    if (nfind(nt, "%slabel_emb.0.0.weight", P))
        return unsupported(e, path, "SDXL or unCLIP UNet (found label_emb)");
    const struct st_tensor *t0 = nfind(nt, "%sinput_blocks.0.0.weight", P);
    if (!t0 || t0->ndim != 4)
        return unsupported(e, path, "UNet without input_blocks.0.0.weight");
    c->unet_mc = (int)t0->shape[0];
    c->unet_in_ch = (int)t0->shape[1];
    if (c->unet_in_ch == 9)
        return unsupported(e, path, "SD1.x inpainting UNet (in_channels 9)");
    if (c->unet_in_ch == 8)
        return unsupported(e, path, "instruct-pix2pix UNet (in_channels 8)");
    if (c->unet_in_ch != 4) {
        char w[96];
        snprintf(w, sizeof(w), "UNet with %d input channels", c->unet_in_ch);
        return unsupported(e, path, w);
    }
    const struct st_tensor *k = nfind(nt, "%sinput_blocks.1.1.transformer_blocks.0.attn2.to_k.weight", P);
    const struct st_tensor *pin = nfind(nt, "%sinput_blocks.1.1.proj_in.weight", P);
    if (!k || k->ndim != 2 || !pin)
        return unsupported(e, path, "UNet without SD1.x cross-attention at the first level");
    c->ctx_dim = (int)k->shape[1];
    if (c->ctx_dim == 1024)
        return unsupported(e, path, "SD2.x UNet (context width 1024)");
    if (c->ctx_dim == 2048)
        return unsupported(e, path, "SDXL UNet (context width 2048)");
    for (int l = 0; l < 4; l++) {
        const struct st_tensor *o = nfind(nt, "%sinput_blocks.%d.0.out_layers.3.weight", P, 1 + 3 * l);
        if (!o || o->shape[0] % c->unet_mc)
            return unsupported(e, path, "UNet whose levels differ from SD1.x (4 levels, 2 ResBlocks each)");
        c->unet_mult[l] = (int)(o->shape[0] / c->unet_mc);
    }
    int depth = 0;
    while (nfind(nt, "%sinput_blocks.1.1.transformer_blocks.%d.norm1.weight", P, depth))
        depth++;
    c->unet_depth = depth;
    const struct st_tensor *out = nfind(nt, "%sout.2.weight", P);
    c->unet_out_ch = out ? (int)out->shape[0] : 4;
    c->unet_heads = meta_int(f, "latentd.unet_heads", 8);
    if (c->unet_mc % 32)
        return err_set(e, ERR_INVALID, "'%s': UNet width %d is not a multiple of 32 (GroupNorm)",
                       path, c->unet_mc);
    for (int l = 0; l < 3; l++)
        if ((c->unet_mult[l] * c->unet_mc) % c->unet_heads)
            return err_set(e, ERR_INVALID, "'%s': UNet width %d not divisible by %d heads", path,
                           c->unet_mult[l] * c->unet_mc, c->unet_heads);
    return 0;
}

static int detect_clip(const struct st_file *f, const struct ntable *nt, struct model_config *c,
                       struct err *e)
{
    const char *path = f->path;
    const char *P = SD15_PREFIX_CLIP;
    const struct st_tensor *tok = nfind(nt, "%sembeddings.token_embedding.weight", P);
    const struct st_tensor *pos = nfind(nt, "%sembeddings.position_embedding.weight", P);
    const struct st_tensor *fc1 = nfind(nt, "%sencoder.layers.0.mlp.fc1.weight", P);
    if (!tok || !pos || !fc1 || tok->ndim != 2 || pos->ndim != 2 || fc1->ndim != 2)
        return err_set(e, ERR_INVALID,
                       "'%s': CLIP text encoder incomplete (token/position embedding or layer 0 "
                       "missing)",
                       path);
    c->clip_vocab = (int)tok->shape[0];
    c->clip_width = (int)tok->shape[1];
    c->clip_pos = (int)pos->shape[0];
    c->clip_mlp = (int)fc1->shape[0];
    int layers = 0;
    while (nfind(nt, "%sencoder.layers.%d.layer_norm1.weight", P, layers))
        layers++;
    c->clip_layers = layers;
    c->clip_heads = meta_int(f, "latentd.clip_heads", c->clip_width % 64 == 0 ? c->clip_width / 64 : 1);
    if (c->clip_width % c->clip_heads)
        return err_set(e, ERR_INVALID, "'%s': CLIP width %d not divisible by %d heads", path,
                       c->clip_width, c->clip_heads);
    if (c->clip_pos != 77 || c->clip_vocab != 49408)
        return err_set(e, ERR_UNSUPPORTED,
                       "'%s': CLIP text encoder with %d tokens and %d positions (SD1.x has "
                       "49408 and 77)",
                       path, c->clip_vocab, c->clip_pos);
    return 0;
}

static int detect_vae(const struct st_file *f, const struct ntable *nt, struct model_config *c,
                      struct err *e)
{
    const char *P = MODEL_PREFIX_VAE;
    const struct st_tensor *cin = nfind(nt, "%sencoder.conv_in.weight", P);
    const struct st_tensor *dcin = nfind(nt, "%sdecoder.conv_in.weight", P);
    const struct st_tensor *pq = nfind(nt, "%spost_quant_conv.weight", P);
    if (!cin || !dcin || !pq || cin->ndim != 4 || dcin->ndim != 4)
        return err_set(e, ERR_INVALID,
                       "'%s': VAE incomplete (encoder.conv_in, decoder.conv_in or "
                       "post_quant_conv missing)",
                       f->path);
    c->vae_ch = (int)cin->shape[0];
    c->vae_z = (int)dcin->shape[1];
    c->vae_embed = (int)pq->shape[0];
    for (int l = 0; l < 4; l++) {
        const struct st_tensor *b = nfind(nt, "%sencoder.down.%d.block.1.conv2.weight", P, l);
        if (!b || b->shape[0] % c->vae_ch)
            return err_set(e, ERR_INVALID, "'%s': VAE encoder level %d missing or malformed",
                           f->path, l);
        c->vae_mult[l] = (int)(b->shape[0] / c->vae_ch);
    }
    if (c->vae_ch % 32)
        return err_set(e, ERR_INVALID, "'%s': VAE width %d is not a multiple of 32 (GroupNorm)",
                       f->path, c->vae_ch);
    return 0;
}

static int detect(const struct st_file *f, const struct ntable *nt, unsigned flags,
                  struct model_config *c, struct err *e)
{
    const char *path = f->path;
    sd15_config_canonical(c);
    size_t n_unet = count_prefix(nt, MODEL_PREFIX_UNET);
    if (count_prefix(nt, "conditioner.embedders."))
        return unsupported(e, path, "SDXL checkpoint (conditioner.embedders.* text encoders)");
    if (count_prefix(nt, "cond_stage_model.model."))
        return unsupported(e, path, "SD2.x checkpoint (OpenCLIP text encoder cond_stage_model.model.*)");
    if ((flags & MODEL_LOAD_UNET) && n_unet <= 5) {
        /* Name something recognisable from the raw keys. */
        const char *what = "no SD1.x UNet (model.diffusion_model.*) found";
        for (size_t i = 0; i < f->n_tensors; i++) {
            const char *nm = f->tensors[i].name;
            if (strstr(nm, "double_blocks.")) {
                what = "Flux-style transformer (double_blocks.*)";
                break;
            }
            if (strstr(nm, "joint_blocks.")) {
                what = "SD3-style MMDiT (joint_blocks.*)";
                break;
            }
            if (starts_with(nm, "down_blocks.") || starts_with(nm, "unet.down_blocks.")) {
                what = "diffusers-format UNet (down_blocks.*); use a single-file checkpoint";
                break;
            }
            if (starts_with(nm, "lora_") || strstr(nm, ".lora_up.") || strstr(nm, "lora_A")) {
                what = "a LoRA file, not a checkpoint";
                break;
            }
        }
        return unsupported(e, path, what);
    }
    int rc;
    if ((flags & MODEL_LOAD_UNET) && (rc = detect_unet(f, nt, c, e)) < 0)
        return rc;
    if (flags & MODEL_LOAD_CLIP) {
        if (!count_prefix(nt, SD15_PREFIX_CLIP))
            return err_set(e, ERR_INVALID, "'%s' has no CLIP text encoder (%s*)", path,
                           SD15_PREFIX_CLIP);
        if ((rc = detect_clip(f, nt, c, e)) < 0)
            return rc;
    }
    if (flags & MODEL_LOAD_VAE) {
        /* A VAE file without either conv_in (a T5's encoder.block.*, ...) is no VAE at all. */
        if ((flags & MODEL_LOAD_VAE_FILE) &&
            (!count_prefix(nt, MODEL_PREFIX_VAE) ||
             (!nfind(nt, "%sencoder.conv_in.weight", MODEL_PREFIX_VAE) &&
              !nfind(nt, "%sdecoder.conv_in.weight", MODEL_PREFIX_VAE))))
            return ckpt__not_a_vae(f, e);
        if (!count_prefix(nt, MODEL_PREFIX_VAE))
            return err_set(e, ERR_INVALID, "'%s' has no VAE (%s*)", path, MODEL_PREFIX_VAE);
        if ((rc = detect_vae(f, nt, c, e)) < 0)
            return rc;
    }
    if ((flags & MODEL_LOAD_UNET) && (flags & MODEL_LOAD_CLIP) && c->ctx_dim != c->clip_width)
        return unsupported(e, path, "UNet context width differs from the text encoder width");
    /* A 2-D proj_in is SD2's linear transformer unless everything else says SD1.x (§1.3):
     * the checks above already refused SD2's context widths and text encoder. */
    return 0;
}

/* ---- validation --------------------------------------------------------------------------- */

/* Shape equality, accepting a 2-D [o,i] stored for a 1x1 conv [o,i,1,1] (§1.3). */
static int shape_ok(const struct st_tensor *t, const struct model_key *k)
{
    if (t->ndim == k->ndim) {
        for (int i = 0; i < k->ndim; i++)
            if (t->shape[i] != k->shape[i])
                return 0;
        return 1;
    }
    return k->ndim == 4 && t->ndim == 2 && k->shape[2] == 1 && k->shape[3] == 1 &&
           t->shape[0] == k->shape[0] && t->shape[1] == k->shape[1];
}

static int check_finite(const struct st_file *f, const struct st_tensor *t)
{
    const uint8_t *p = st_tensor_data(f, t);
    uint64_t n = st_tensor_numel(t);
    if (t->dtype == ST_DTYPE_F32) {
        for (uint64_t i = 0; i < n; i++) {
            uint32_t x;
            memcpy(&x, p + 4 * i, 4);
            if ((x & 0x7f800000u) == 0x7f800000u)
                return 0;
        }
    } else if (t->dtype == ST_DTYPE_F16 || t->dtype == ST_DTYPE_BF16) {
        uint16_t mask = t->dtype == ST_DTYPE_F16 ? 0x7c00u : 0x7f80u;
        for (uint64_t i = 0; i < n; i++) {
            uint16_t x;
            memcpy(&x, p + 2 * i, 2);
            if ((x & mask) == mask)
                return 0;
        }
    }
    return 1;
}

void model_layer_of(enum model_component comp, const char *rel, char *out, size_t size)
{
    /* Number of dot-separated parts that name the layer. */
    int parts = 1;
    if (comp == MODEL_UNET) {
        if (starts_with(rel, "input_blocks.") || starts_with(rel, "output_blocks."))
            parts = 3;
        else if (starts_with(rel, "middle_block."))
            parts = 2;
    } else if (comp == MODEL_CLIP) {
        parts = starts_with(rel, "encoder.layers.") ? 3 : 1;
    } else {
        if (starts_with(rel, "encoder.down.") || starts_with(rel, "decoder.up.")) {
            const char *p = strchr(rel, '.');
            p = p ? strchr(p + 1, '.') : NULL;
            p = p ? strchr(p + 1, '.') : NULL;
            parts = (p && starts_with(p + 1, "block.")) ? 5 : 4;
        } else if (starts_with(rel, "encoder.mid.") || starts_with(rel, "decoder.mid.")) {
            parts = 3;
        } else if (starts_with(rel, "encoder.norm_out") || starts_with(rel, "encoder.conv_out")) {
            snprintf(out, size, "encoder.out");
            return;
        } else if (starts_with(rel, "decoder.norm_out") || starts_with(rel, "decoder.conv_out")) {
            snprintf(out, size, "decoder.out");
            return;
        } else if (starts_with(rel, "encoder.") || starts_with(rel, "decoder.")) {
            parts = 2;
        }
    }
    size_t i = 0;
    int seen = 0;
    for (; rel[i]; i++)
        if (rel[i] == '.' && ++seen == parts)
            break;
    snprintf(out, size, "%.*s", (int)i, rel);
}

struct build {
    const struct st_file *f;
    struct ntable *nt;
    unsigned flags;
    struct ckpt__items *items;
    struct err *e;
    int rc;
};

static const unsigned comp_flag[MODEL_COMPONENT_COUNT] = {MODEL_LOAD_UNET, MODEL_LOAD_VAE,
                                                          MODEL_LOAD_CLIP};
static const char *const comp_prefix[MODEL_COMPONENT_COUNT] = {MODEL_PREFIX_UNET, MODEL_PREFIX_VAE,
                                                               SD15_PREFIX_CLIP};

const char *ckpt__comp_prefix(enum model_component c)
{
    return comp_prefix[c];
}

static void on_key(void *user, const struct model_key *k)
{
    struct build *b = user;
    if (b->rc < 0 || !(b->flags & comp_flag[k->comp]))
        return;
    const char *path = b->f->path;
    struct nkey *nk = ntable_find(b->nt, k->name);
    char want[96], got[96];
    if (!nk) {
        b->rc = err_set(b->e, ERR_INVALID, "'%s': tensor '%s' is missing", path, k->name);
        return;
    }
    nk->used = 1;
    const struct st_tensor *t = nk->t;
    if (!shape_ok(t, k)) {
        struct st_tensor tmp = {.ndim = k->ndim};
        memcpy(tmp.shape, k->shape, sizeof(k->shape));
        st_shape_str(&tmp, want, sizeof(want));
        st_shape_str(t, got, sizeof(got));
        b->rc = err_set(b->e, ERR_INVALID, "'%s': tensor '%s' has shape %s, expected %s", path,
                        t->name, got, want);
        return;
    }
    enum tensor_dtype src_dt;
    if (ckpt__tensor_dtype(t, &src_dt) < 0) {
        b->rc = err_set(b->e, ERR_UNSUPPORTED,
                        "'%s': tensor '%s' is stored as %s; only F32, F16 and BF16 are "
                        "supported%s",
                        path, t->name, st_dtype_name(t->dtype),
                        t->dtype == ST_DTYPE_F8_E4M3 || t->dtype == ST_DTYPE_F8_E5M2
                            ? " (convert fp8 checkpoints to fp16)"
                            : "");
        return;
    }
    if (!check_finite(b->f, t)) {
        b->rc = err_set(b->e, ERR_INVALID, "'%s': tensor '%s' contains NaN or infinite values",
                        path, t->name);
        return;
    }
    struct ckpt__items *it = b->items;
    if (it->n == it->cap) {
        it->cap = it->cap ? 2 * it->cap : 1024;
        it->v = xrealloc(it->v, it->cap * sizeof(*it->v));
    }
    it->v[it->n].key = *k;
    it->v[it->n].t = t;
    it->n++;
}

static int check_unused(const struct build *b)
{
    for (size_t i = 0; i < b->nt->n; i++) {
        const struct nkey *k = &b->nt->v[i];
        if (k->used)
            continue;
        for (int c = 0; c < MODEL_COMPONENT_COUNT; c++)
            if ((b->flags & comp_flag[c]) && starts_with(k->name, comp_prefix[c]))
                return err_set(b->e, ERR_INVALID,
                               "'%s': unexpected tensor '%s' (not part of the SD1.x %s layout)",
                               b->f->path, k->t->name, model_component_name((enum model_component)c));
    }
    return 0;
}

int ckpt__tensor_dtype(const struct st_tensor *t, enum tensor_dtype *dt)
{
    switch (t->dtype) {
    case ST_DTYPE_F32: *dt = TENSOR_F32; return 0;
    case ST_DTYPE_F16: *dt = TENSOR_F16; return 0;
    case ST_DTYPE_BF16: *dt = TENSOR_BF16; return 0;
    default: return -1;
    }
}

int ckpt__validate(const char *path, unsigned flags, struct st_file **f_out,
                   struct model_config *cfg, struct ckpt__items *items, int *skipped,
                   struct err *e)
{
    struct st_file *f = NULL;
    struct ntable nt = {0};
    int rc;
    *f_out = NULL;
    memset(items, 0, sizeof(*items));
    if ((rc = st_open(path, &f, e)) < 0)
        return rc;
    ntable_build(f, flags, &nt);
    if ((rc = detect(f, &nt, flags, cfg, e)) < 0)
        goto fail;
    struct build b = {.f = f, .nt = &nt, .flags = flags, .items = items, .e = e};
    model_layout_build(cfg, on_key, &b);
    if ((rc = b.rc) < 0 || (rc = check_unused(&b)) < 0)
        goto fail;
    if (skipped)
        *skipped = nt.skipped;
    ntable_release(&nt);
    *f_out = f;
    return 0;
fail:
    ntable_release(&nt);
    xfree(items->v);
    memset(items, 0, sizeof(*items));
    st_close(f);
    return rc;
}

int model_ckpt_probe(const char *path, struct model_config *cfg, struct err *e)
{
    struct st_file *f;
    struct ckpt__items items;
    int rc = ckpt__validate(path, MODEL_LOAD_ALL, &f, cfg, &items, NULL, e);
    if (rc < 0)
        return rc;
    xfree(items.v);
    st_close(f);
    return 0;
}
