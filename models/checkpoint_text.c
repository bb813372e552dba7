/*
 * Standalone text-encoder files (model_text_probe / model_text_load in checkpoint.h):
 * their tensor names mapped onto the checkpoint names of the family slot they are
 * loaded as, so that validation and loading are the checkpoint's own (checkpoint.c,
 * checkpoint_load.c) and the patcher's weight keys are exactly a checkpoint's (LoRA,
 * CLIPMerge* and CLIPSave see no difference).
 *
 * Accepted, as ComfyUI's load_text_encoder_state_dicts reads them:
 *   - Hugging Face names: text_model.embeddings.*, text_model.encoder.layers.N.*,
 *     text_model.final_layer_norm.*, a top-level text_projection.weight (the Linear of
 *     CLIPTextModelWithProjection: P transposed, text_arch.h);
 *   - OpenCLIP names: token_embedding.weight, positional_embedding,
 *     transformer.resblocks.N.*, ln_final.*, text_projection (P), logit_scale;
 *   - either under a checkpoint's text-encoder prefix (cond_stage_model.transformer.
 *     [text_model.], cond_stage_model.model., conditioner.embedders.N.*), which is how
 *     a full checkpoint or a CLIPSave file holds it. Other tensors (a checkpoint's UNet
 *     and VAE) are skipped.
 * Which encoder a file is: ComfyUI's detect_te_model (a layer 30 means bigG, a layer 22
 * ViT-H, else CLIP-L), unless a checkpoint prefix names it or a shrunk test file says
 * so in its __metadata__ ("latentd.clip_kind": clip_l, clip_h, clip_g).
 *
 * An encoder in Hugging Face naming keeps that naming inside latentd (separate q/k/v
 * projections, the transposed projection): both namings hold the same products, so the
 * embeddings equal those of the same weights in a checkpoint bit for bit, and no weight
 * is copied.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "checkpoint_impl.h"
#include "family.h"

static int starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* Checkpoint prefixes of text encoders, the naming below them and the kind they hold. */
static const struct {
    const char *prefix;
    int naming; /* enum text_naming */
    enum model_text_kind kind;
    int encoder; /* which checkpoint encoder (two names for SD1's), 0 = bare */
} text_prefixes[] = {
    {"cond_stage_model.transformer.text_model.", TEXT_NAMING_HF, MODEL_TEXT_CLIP_L, 1},
    {"cond_stage_model.transformer.", TEXT_NAMING_HF, MODEL_TEXT_CLIP_L, 1}, /* no text_model. */
    {"cond_stage_model.model.", TEXT_NAMING_OPENCLIP, MODEL_TEXT_CLIP_H, 2},
    {"conditioner.embedders.0.transformer.text_model.", TEXT_NAMING_HF, MODEL_TEXT_CLIP_L, 3},
    {"conditioner.embedders.0.model.", TEXT_NAMING_OPENCLIP, MODEL_TEXT_CLIP_G, 4}, /* refiner */
    {"conditioner.embedders.1.model.", TEXT_NAMING_OPENCLIP, MODEL_TEXT_CLIP_G, 5},
    {"text_model.", TEXT_NAMING_HF, MODEL_TEXT_NONE, 0},
};
#define N_PREFIXES (sizeof text_prefixes / sizeof text_prefixes[0])

/* Bare OpenCLIP names (open_clip's state dict) and the bare HF projection. */
static const char *const openclip_bare[] = {"token_embedding.weight", "positional_embedding",
                                            "transformer.resblocks.", "ln_final.",
                                            "text_projection", "logit_scale", "attn_mask"};

/*
 * The encoder-relative name of file tensor `name` and its naming; *kind gets what a
 * checkpoint prefix says (MODEL_TEXT_NONE when bare) and *encoder which of a checkpoint's
 * encoders that is (0 when bare). NULL when the tensor is no text
 * encoder's.
 */
static const char *text_rel(const char *name, int *naming, enum model_text_kind *kind,
                            int *encoder)
{
    *kind = MODEL_TEXT_NONE;
    *encoder = 0;
    for (size_t i = 0; i < N_PREFIXES; i++)
        if (starts_with(name, text_prefixes[i].prefix)) {
            *naming = text_prefixes[i].naming;
            *kind = text_prefixes[i].kind;
            *encoder = text_prefixes[i].encoder;
            return name + strlen(text_prefixes[i].prefix);
        }
    if (strcmp(name, "text_projection.weight") == 0) {
        *naming = TEXT_NAMING_HF;
        return name;
    }
    for (size_t i = 0; i < sizeof openclip_bare / sizeof openclip_bare[0]; i++) {
        const char *b = openclip_bare[i];
        size_t n = strlen(b);
        if (b[n - 1] == '.' ? starts_with(name, b) : strcmp(name, b) == 0) {
            *naming = TEXT_NAMING_OPENCLIP;
            return name;
        }
    }
    return NULL;
}

/* The family and slot a load of a text file targets (flags, checkpoint_impl.h). */
static const struct model_family *target(unsigned flags, int *slot)
{
    *slot = (flags & CKPT_LOAD_TEXT_SECOND) ? 1 : 0;
    return model_family_get((int)((flags >> CKPT_LOAD_TEXT_FAMILY_SHIFT) & 0xf) - 1);
}

int ckpt__text_file_name(const char *name, unsigned flags, char *out, size_t size)
{
    int slot, naming, enc;
    enum model_text_kind kind;
    const struct model_family *fam = target(flags, &slot);
    const char *rel = text_rel(name, &naming, &kind, &enc);
    if (!fam || !rel)
        return -1;
    struct model_config canon;
    memset(&canon, 0, sizeof canon);
    fam->canonical(&canon);
    char internal[384];
    if (naming == TEXT_NAMING_OPENCLIP) {
        int rc = text_name_from_file(TEXT_NAMING_OPENCLIP, rel, internal, sizeof internal);
        if (rc <= 0) /* logit_scale, attn_mask, unknown buffers */
            return -1;
    } else {
        /* The position_ids buffer is never read; a projection only where the family's
         * encoder has one (CLIP-L files often carry one that SD never uses). */
        if (strcmp(rel, "embeddings.position_ids") == 0 ||
            (starts_with(rel, "text_projection") && canon.text[slot].proj_dim == 0))
            return -1;
        snprintf(internal, sizeof internal, "%s", rel);
    }
    snprintf(out, size, "%s%s", fam->prefix[MODEL_CLIP + slot], internal);
    return 1;
}

static int meta_int(const struct st_file *f, const char *key, int dflt)
{
    const char *v = st_meta_get(f, key);
    long x = v ? strtol(v, NULL, 10) : 0;
    return x > 0 && x <= 4096 ? (int)x : dflt;
}

int ckpt__detect_text(const struct st_file *f, const struct ntable *nt, unsigned flags,
                      struct model_config *c, struct err *e)
{
    int slot;
    const struct model_family *fam = target(flags, &slot);
    ASSERT(fam && fam->prefix[MODEL_CLIP + slot]);
    const char *P = fam->prefix[MODEL_CLIP + slot];
    memset(c, 0, sizeof *c);
    fam->canonical(c); /* activation, proj, vocab: the family's */
    struct text_arch *t = &c->text[slot];
    c->text[1 - slot].width = 0; /* this file is one encoder */
    const struct st_tensor *tok = ckpt__nfind(nt, "%sembeddings.token_embedding.weight", P);
    const struct st_tensor *pos = ckpt__nfind(nt, "%sembeddings.position_embedding.weight", P);
    const struct st_tensor *fc1 = ckpt__nfind(nt, "%sencoder.layers.0.mlp.fc1.weight", P);
    if (!tok || !pos || !fc1 || tok->ndim != 2 || pos->ndim != 2 || fc1->ndim != 2)
        return err_set(e, ERR_INVALID,
                       "'%s' is not a CLIP text encoder: token/position embedding or layer 0 "
                       "missing (%zu tensors%s%s%s)",
                       f->path, f->n_tensors, f->n_tensors ? ", first '" : "",
                       f->n_tensors ? f->tensors[0].name : "", f->n_tensors ? "'" : "");
    t->vocab = (int)tok->shape[0];
    t->width = (int)tok->shape[1];
    t->pos = (int)pos->shape[0];
    t->mlp = (int)fc1->shape[0];
    t->layers = 0;
    while (ckpt__nfind(nt, "%sencoder.layers.%d.layer_norm1.weight", P, t->layers))
        t->layers++;
    t->naming = ckpt__nfind(nt, "%sencoder.layers.0.self_attn.in_proj.weight", P)
                    ? TEXT_NAMING_OPENCLIP
                    : TEXT_NAMING_HF;
    if (t->proj_dim > 0) {
        const struct st_tensor *pj =
            t->naming == TEXT_NAMING_OPENCLIP ? ckpt__nfind(nt, "%stext_projection", P)
                                              : ckpt__nfind(nt, "%stext_projection.weight", P);
        if (!pj || pj->ndim != 2)
            return err_set(e, ERR_INVALID,
                           "'%s': text encoder without its text_projection (%s needs the "
                           "projected pooled output)",
                           f->path, fam->name);
        t->proj_dim = (int)pj->shape[t->naming == TEXT_NAMING_OPENCLIP ? 1 : 0];
    }
    t->heads = meta_int(f, "latentd.clip_heads", fam->text_heads(t));
    if (t->width % t->heads)
        return err_set(e, ERR_INVALID, "'%s': CLIP width %d not divisible by %d heads", f->path,
                       t->width, t->heads);
    if (t->pos != 77 || t->vocab != 49408)
        return err_set(e, ERR_UNSUPPORTED,
                       "'%s': CLIP text encoder with %d tokens and %d positions (expected 49408 "
                       "and 77)",
                       f->path, t->vocab, t->pos);
    return 0;
}

/* What a file holding no CLIP text encoder holds, for the error. */
static const char *other_kind(const struct st_file *f)
{
    for (size_t i = 0; i < f->n_tensors; i++) {
        const char *nm = f->tensors[i].name;
        if (strstr(nm, "encoder.block.") && strstr(nm, "DenseReluDense"))
            return "a T5 text encoder";
        if (starts_with(nm, "model.layers."))
            return "a language-model text encoder (Llama, Gemma, Qwen)";
        if (strstr(nm, "lora_") || strstr(nm, "lora_A"))
            return "a LoRA";
        if (starts_with(nm, "model.diffusion_model.") || starts_with(nm, "input_blocks."))
            return "a UNet without a text encoder";
        if (strstr(nm, "encoder.conv_in.") || strstr(nm, "decoder.conv_in."))
            return "a VAE";
    }
    return "no CLIP text encoder tensors";
}

int model_text_probe(const char *path, enum model_text_kind *kind, struct err *e)
{
    struct st_file *f = NULL;
    int rc = st_open(path, &f, e);
    if (rc < 0)
        return rc;
    enum model_text_kind by_prefix = MODEL_TEXT_NONE, found = MODEL_TEXT_NONE;
    int layers = 0, any = 0;
    unsigned encoders = 0; /* checkpoint encoders seen, by text_prefixes' encoder */
    for (size_t i = 0; i < f->n_tensors; i++) {
        int naming, l = -1, enc;
        enum model_text_kind k;
        const char *rel = text_rel(f->tensors[i].name, &naming, &k, &enc);
        /* Buffers are no encoder (an SDXL VAE-only file may keep the encoders' ones). */
        if (!rel || strcmp(rel, "embeddings.position_ids") == 0 ||
            strcmp(rel, "logit_scale") == 0 || strcmp(rel, "attn_mask") == 0)
            continue;
        any = 1;
        encoders |= enc ? 1u << enc : 0;
        if (k != MODEL_TEXT_NONE)
            by_prefix = k;
        int got = naming == TEXT_NAMING_HF ? sscanf(rel, "encoder.layers.%d.", &l)
                                           : sscanf(rel, "transformer.resblocks.%d.", &l);
        if (got == 1 && l + 1 > layers)
            layers = l + 1;
    }
    const char *meta = st_meta_get(f, "latentd.clip_kind");
    if (meta && strcmp(meta, "clip_l") == 0)
        found = MODEL_TEXT_CLIP_L;
    else if (meta && strcmp(meta, "clip_h") == 0)
        found = MODEL_TEXT_CLIP_H;
    else if (meta && strcmp(meta, "clip_g") == 0)
        found = MODEL_TEXT_CLIP_G;
    else if (by_prefix != MODEL_TEXT_NONE)
        found = by_prefix;
    else if (layers > 30)
        found = MODEL_TEXT_CLIP_G;
    else if (layers > 22)
        found = MODEL_TEXT_CLIP_H;
    else if (layers > 0)
        found = MODEL_TEXT_CLIP_L;
    if (!any || found == MODEL_TEXT_NONE)
        rc = err_set(e, ERR_INVALID, "'%s' is not a CLIP text encoder: it holds %s", path,
                     other_kind(f));
    else if (encoders & (encoders - 1))
        rc = err_set(e, ERR_UNSUPPORTED,
                     "'%s' holds more than one text encoder (a whole SDXL checkpoint?); load "
                     "it with CheckpointLoaderSimple",
                     path);
    *kind = found;
    st_close(f);
    return rc;
}

int model_text_load(const char *path, int family, enum model_component comp,
                    enum tensor_dtype dt, struct model_ckpt *ck, struct err *e)
{
    const struct model_family *fam = model_family_get(family);
    if (!fam || comp < MODEL_CLIP || !fam->prefix[comp])
        return err_set(e, ERR_INVALID, "no %s text encoder slot %d",
                       fam ? fam->name : "such family", comp - MODEL_CLIP + 1);
    unsigned flags = MODEL_LOAD_CLIP | CKPT_LOAD_TEXT_FILE |
                     ((unsigned)(family + 1) << CKPT_LOAD_TEXT_FAMILY_SHIFT) |
                     (comp == MODEL_CLIP2 ? CKPT_LOAD_TEXT_SECOND : 0);
    const enum tensor_dtype d3[3] = {dt, dt, dt};
    return model_ckpt_load(path, flags, d3, ck, e);
}

const char *model_text_kind_name(enum model_text_kind k)
{
    switch (k) {
    case MODEL_TEXT_CLIP_L: return "CLIP-L";
    case MODEL_TEXT_CLIP_H: return "OpenCLIP ViT-H";
    case MODEL_TEXT_CLIP_G: return "OpenCLIP ViT-bigG";
    default: return "none";
    }
}

void model_text_file_meta(const struct model_config *cfg, enum model_component comp,
                          void (*fn)(void *user, const char *key, const char *val), void *user)
{
    const struct model_family *fam = model_family_get(cfg->family);
    if (!fam || comp < MODEL_CLIP || model_config_is_canonical(cfg))
        return;
    int slot = comp - MODEL_CLIP;
    char v[32];
    snprintf(v, sizeof v, "%d", cfg->text[slot].heads);
    fn(user, "latentd.clip_heads", v);
    fn(user, "latentd.clip_kind", fam->text_naming[slot] == TEXT_NAMING_HF ? "clip_l"
                                  : cfg->family == MODEL_FAMILY_SD2        ? "clip_h"
                                                                           : "clip_g");
}
