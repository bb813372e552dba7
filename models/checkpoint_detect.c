/*
 * Checkpoint detection (sd15.md §1.5, sdxl.md §3): every knob is derived from shapes
 * the way ComfyUI's model_detection.detect_unet_config walks the keys, then the
 * family table decides what the UNet is (family.h). What no family accepts is
 * refused with ERR_UNSUPPORTED naming what was found.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "checkpoint_impl.h"
#include "alloc.h"
#include "family.h"

#define nfind ckpt__nfind
#define count_prefix ckpt__count_prefix

static int starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

static int unsupported(struct err *e, const char *path, const char *what)
{
    return err_set(e, ERR_UNSUPPORTED,
                   "unsupported model type in '%s': %s (supported: SD1.x, SD2.x, SDXL base and "
                   "refiner)",
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

/* Transformer blocks of the SpatialTransformer at `p` (0 when there is none). */
static int st_depth(const struct ntable *nt, const char *p)
{
    int d = 0;
    while (nfind(nt, "%s%s.transformer_blocks.%d.norm1.weight", MODEL_PREFIX_UNET, p, d))
        d++;
    return d;
}

/* The first SpatialTransformer gives the context width and the projection kind. */
static void note_st(const struct ntable *nt, const char *p, struct unet_arch *u)
{
    const char *P = MODEL_PREFIX_UNET;
    const struct st_tensor *k = nfind(nt, "%s%s.transformer_blocks.0.attn2.to_k.weight", P, p);
    const struct st_tensor *pin = nfind(nt, "%s%s.proj_in.weight", P, p);
    if (u->ctx_dim || !k || k->ndim != 2 || !pin)
        return;
    u->ctx_dim = (int)k->shape[1];
    u->linear_proj = pin->ndim == 2;
}

/* input_blocks.N in order: a ResBlock adds to the level, a downsampler ends it. */
static int walk_input(const struct ntable *nt, struct unet_arch *u)
{
    const char *P = MODEL_PREFIX_UNET;
    char p[48];
    int lv = 0;
    for (int idx = 1; lv < UNET_MAX_LEVELS; idx++) {
        if (nfind(nt, "%sinput_blocks.%d.0.op.weight", P, idx)) {
            lv++;
            continue;
        }
        const struct st_tensor *o = nfind(nt, "%sinput_blocks.%d.0.out_layers.3.weight", P, idx);
        if (!o)
            break;
        if (o->shape[0] % u->model_ch)
            return -1;
        snprintf(p, sizeof(p), "input_blocks.%d.1", idx);
        if (u->res_blocks[lv]++ == 0) {
            u->mult[lv] = (int)(o->shape[0] / u->model_ch);
            u->depth[lv] = st_depth(nt, p);
        }
        note_st(nt, p, u);
    }
    u->levels = lv + 1;
    return lv < UNET_MAX_LEVELS && u->res_blocks[lv] > 0 ? 0 : -1;
}

/* Why no family took u, in the order the old SD1.x-only checks gave. */
static int explain(const char *path, const struct unet_arch *u, struct err *e)
{
    if (u->adm_in)
        return unsupported(e, path,
                           "UNet with an ADM input (found label_emb) of no known family: "
                           "SDXL refiner, SSD-1B, unCLIP, ...");
    if (!u->ctx_dim)
        return unsupported(e, path, "UNet without SD1.x cross-attention at the first level");
    if (u->ctx_dim == 1024)
        return unsupported(e, path,
                           "SD2.x UNet (context width 1024) with 1x1 conv projections (SD2.x "
                           "has Linear ones) or another structure");
    if (u->ctx_dim == 2048)
        return unsupported(e, path, "SDXL-like UNet (context width 2048) without SDXL's structure");
    return unsupported(e, path, "UNet whose levels differ from SD1.x (4 levels, 2 ResBlocks each)");
}

/*
 * The input channels ComfyUI's entry for the family takes: 4, or a concat-conditioned
 * model's (inpainting 9, instruct-pix2pix 8; model_family_concat). Detection by structure
 * ignores in_ch, so this names the family it would have been.
 */
static int check_in_ch(const char *path, const struct model_family *fam, int in_ch,
                       struct err *e)
{
    char w[160];
    if (model_family_concat(fam, in_ch) >= 0)
        return 0;
    snprintf(w, sizeof(w), "%s UNet with %d input channels (%s takes 4%s%s)", fam->name, in_ch,
             fam->name,
             fam->concat_kinds & (1u << MODEL_CONCAT_INPAINT) ? ", 9 for inpainting" : "",
             fam->concat_kinds & (1u << MODEL_CONCAT_IP2P) ? ", 8 for instruct-pix2pix" : "");
    return unsupported(e, path, w);
}

static int has_prefix(void *user, const char *prefix)
{
    return count_prefix(user, prefix) > 0;
}

/*
 * ComfyUI's model_type: SDXL's marks v-prediction (and zsnr) with top-level keys; SD20's
 * reads a 4-channel UNet's probe tensor (a norm bias near the output), whose population
 * std above 0.09 means v-prediction: the 768-v and 512 files have the same keys and
 * shapes.
 */
static int detect_prediction(const struct st_file *f, const struct ntable *nt,
                             const struct model_family *fam, struct model_config *c,
                             struct err *e)
{
    c->prediction = c->zsnr = 0;
    if (fam->vpred_key && st_find(f, fam->vpred_key)) { /* outside every component prefix */
        c->prediction = 1;
        c->zsnr = st_find(f, "ztsnr") != NULL;
        return 0;
    }
    if (!fam->vpred_probe || c->unet.in_ch != 4)
        return 0;
    const struct st_tensor *t = nfind(nt, "%s%s", MODEL_PREFIX_UNET, fam->vpred_probe);
    uint64_t n = t ? st_tensor_numel(t) : 0;
    if (n == 0 || n > (1u << 20))
        return 0;
    float *v = xmalloc(n * sizeof *v);
    int rc = st_tensor_to_f32(f, t, v, e);
    if (rc == 0) {
        double mean = 0, ss = 0;
        for (uint64_t i = 0; i < n; i++)
            mean += v[i];
        mean /= (double)n;
        for (uint64_t i = 0; i < n; i++)
            ss += (v[i] - mean) * (v[i] - mean);
        c->prediction = sqrt(ss / (double)n) > FAMILY_VPRED_STD; /* torch.std(unbiased=False) */
    }
    xfree(v);
    return rc;
}

/* Heads are not stored: the family's, unless a (test) file says. */
static int unet_heads(const struct st_file *f, const struct unet_arch *canon, struct unet_arch *u,
                      struct err *e)
{
    u->heads = canon->heads;
    u->head_dim = canon->head_dim;
    int h = meta_int(f, "latentd.unet_heads", 0);
    if (h) {
        u->heads = h;
        u->head_dim = 0;
    }
    for (int l = 0; l < u->levels; l++) {
        int ch = u->mult[l] * u->model_ch, div = u->heads ? u->heads : u->head_dim;
        if (u->depth[l] > 0 && ch % div)
            return err_set(e, ERR_INVALID, "'%s': UNet width %d not divisible by %d %s", f->path,
                           ch, div, u->heads ? "heads" : "(head width)");
    }
    return 0;
}

int ckpt__detect_unet(const struct st_file *f, const struct ntable *nt, struct model_config *c,
                      struct err *e)
{
    const char *path = f->path, *P = MODEL_PREFIX_UNET;
    struct unet_arch u = {0};
    const struct st_tensor *t0 = nfind(nt, "%sinput_blocks.0.0.weight", P);
    const struct st_tensor *adm = nfind(nt, "%slabel_emb.0.0.weight", P);
    if (adm && adm->ndim == 2)
        u.adm_in = (int)adm->shape[1];
    if (!t0 || t0->ndim != 4)
        return adm ? explain(path, &u, e)
                   : unsupported(e, path, "UNet without input_blocks.0.0.weight");
    u.model_ch = (int)t0->shape[0];
    u.in_ch = (int)t0->shape[1];
    int rc;
    if (walk_input(nt, &u) < 0)
        return explain(path, &u, e);
    u.depth_mid = st_depth(nt, "middle_block.1");
    const struct st_tensor *out = nfind(nt, "%sout.2.weight", P);
    u.out_ch = out ? (int)out->shape[0] : 4;
    const struct model_family *fam = model_family_detect(&u, has_prefix, (void *)nt);
    if (!fam)
        return explain(path, &u, e);
    if ((rc = check_in_ch(path, fam, u.in_ch, e)) < 0)
        return rc;
    struct model_config canon;
    memset(&canon, 0, sizeof(canon));
    fam->canonical(&canon);
    *c = canon; /* components not detected below keep the family's knobs */
    if (u.model_ch % 32)
        return err_set(e, ERR_INVALID, "'%s': UNet width %d is not a multiple of 32 (GroupNorm)",
                       path, u.model_ch);
    if ((rc = unet_heads(f, &canon.unet, &u, e)) < 0)
        return rc;
    /* Conv or Linear projections are the family's: a file may store a 1x1 conv 2-D
     * (shape_ok accepts both). */
    u.linear_proj = canon.unet.linear_proj;
    c->unet = u;
    return detect_prediction(f, nt, fam, c, e);
}

static int detect_clip(const struct st_file *f, const struct ntable *nt, const char *P,
                       const struct model_family *fam, struct text_arch *t, struct err *e)
{
    const char *path = f->path;
    const struct st_tensor *tok = nfind(nt, "%sembeddings.token_embedding.weight", P);
    const struct st_tensor *pos = nfind(nt, "%sembeddings.position_embedding.weight", P);
    const struct st_tensor *fc1 = nfind(nt, "%sencoder.layers.0.mlp.fc1.weight", P);
    if (!tok || !pos || !fc1 || tok->ndim != 2 || pos->ndim != 2 || fc1->ndim != 2)
        return err_set(e, ERR_INVALID,
                       "'%s': CLIP text encoder incomplete (token/position embedding or layer 0 "
                       "missing)",
                       path);
    t->vocab = (int)tok->shape[0];
    t->width = (int)tok->shape[1];
    t->pos = (int)pos->shape[0];
    t->mlp = (int)fc1->shape[0];
    int layers = 0;
    while (nfind(nt, "%sencoder.layers.%d.layer_norm1.weight", P, layers))
        layers++;
    t->layers = layers;
    const struct st_tensor *pj = nfind(nt, "%stext_projection", P);
    t->proj_dim = pj && pj->ndim == 2 ? (int)pj->shape[1] : 0;
    t->heads = meta_int(f, "latentd.clip_heads", fam->text_heads(t));
    if (t->width % t->heads)
        return err_set(e, ERR_INVALID, "'%s': CLIP width %d not divisible by %d heads", path,
                       t->width, t->heads);
    if (t->pos != 77 || t->vocab != 49408)
        return err_set(e, ERR_UNSUPPORTED,
                       "'%s': CLIP text encoder with %d tokens and %d positions (SD1.x has "
                       "49408 and 77)",
                       path, t->vocab, t->pos);
    return 0;
}

static int detect_vae(const struct st_file *f, const struct ntable *nt, struct vae_arch *v,
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
    v->ch = (int)cin->shape[0];
    v->z = (int)dcin->shape[1];
    v->embed = (int)pq->shape[0];
    for (int l = 0; l < 4; l++) {
        const struct st_tensor *b = nfind(nt, "%sencoder.down.%d.block.1.conv2.weight", P, l);
        if (!b || b->shape[0] % v->ch)
            return err_set(e, ERR_INVALID, "'%s': VAE encoder level %d missing or malformed",
                           f->path, l);
        v->mult[l] = (int)(b->shape[0] / v->ch);
    }
    if (v->ch % 32)
        return err_set(e, ERR_INVALID, "'%s': VAE width %d is not a multiple of 32 (GroupNorm)",
                       f->path, v->ch);
    return 0;
}

int ckpt__detect(const struct st_file *f, const struct ntable *nt, unsigned flags,
                 struct model_config *c, struct err *e)
{
    const char *path = f->path;
    /* Without a UNet (a VAE file, ...) the family is SD1.5's, whose VAE all share. */
    memset(c, 0, sizeof(*c));
    family_sd15.canonical(c);
    size_t n_unet = count_prefix(nt, MODEL_PREFIX_UNET);
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
    if ((flags & MODEL_LOAD_UNET) && (rc = ckpt__detect_unet(f, nt, c, e)) < 0)
        return rc;
    const struct model_family *fam = model_family_get(c->family);
    for (int comp = MODEL_CLIP; comp <= MODEL_CLIP2 && (flags & MODEL_LOAD_CLIP); comp++) {
        const char *P = fam->prefix[comp];
        if (!P)
            continue;
        if (!count_prefix(nt, P))
            return err_set(e, ERR_INVALID, "'%s' has no CLIP text encoder (%s*)", path, P);
        if ((rc = detect_clip(f, nt, P, fam, &c->text[comp - MODEL_CLIP], e)) < 0)
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
        if ((rc = detect_vae(f, nt, &c->vae, e)) < 0)
            return rc;
    }
    if ((flags & MODEL_LOAD_UNET) && (flags & MODEL_LOAD_CLIP) &&
        c->unet.ctx_dim != c->text[0].width + c->text[1].width)
        return unsupported(e, path, "UNet context width differs from the text encoder width");
    /* A 2-D proj_in is SD2's linear transformer unless everything else says SD1.x (§1.3):
     * the checks above already refused SD2's context widths and text encoder. */
    return 0;
}
