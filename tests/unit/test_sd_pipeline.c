/*
 * test_sd_pipeline — the default txt2img workflow at node level on a tiny
 * random-weight checkpoint (sd15.md §9.1): CheckpointLoaderSimple ->
 * CLIPTextEncode (x2) -> EmptyLatentImage -> KSampler -> VAEDecode, on the
 * CPU through the memory manager; plus CLIPSetLastLayer, VAEEncode,
 * VAEDecodeTiled, VAELoader, img2img, and the errors users see.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "harness.h"
#include "memmgr.h"
#include "safetensors.h"
#include "node_registry.h"
#include "node_run.h"
#include "sd_backend.h"
#include "sd_nodes.h"
#include "sd_types.h"
#include "tensor.h"

static struct node_env env;

/* Run `cls` with named inputs (references taken over); returns rc, outputs in out[]. */
static int run_node(const struct node_class *cls, const char *const *names, struct value **vals,
                    int n, struct value **out, char *msg, size_t msg_size)
{
    struct value *in[16] = {0};
    struct value *outs[4] = {0};
    for (int i = 0; i < n; i++) {
        int k = node_class_input_index(cls, names[i]);
        ASSERT(k >= 0);
        in[k] = vals[i];
    }
    struct node_ctx c;
    node_ctx_init(&c, cls, "1", &env, in, outs);
    int rc = cls->run(&c);
    if (msg)
        snprintf(msg, msg_size, "%s: %s", c.exc_type, c.exc_message.ptr);
    node_ctx_release(&c);
    for (int i = 0; i < 16; i++)
        value_unref(in[i]);
    for (int i = 0; i < 4; i++) {
        if (out)
            out[i] = outs[i];
        else
            value_unref(outs[i]);
    }
    return rc;
}

static struct value *encode(struct value *clip, const char *text)
{
    const char *names[] = {"text", "clip"};
    struct value *v[] = {value_new_string(text), value_ref(clip)};
    struct value *out[4];
    if (run_node(&sd_clip_text_encode, names, v, 2, out, NULL, 0) < 0)
        return NULL;
    return out[0];
}

static struct value *ksample(struct value *model, struct value *pos, struct value *neg,
                             struct value *latent, uint64_t seed, double denoise,
                             const char *sampler)
{
    const char *names[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                           "positive", "negative", "latent_image", "denoise"};
    struct value *v[] = {value_ref(model), value_new_u64(seed), value_new_int(3),
                         value_new_float(7.0), value_new_string(sampler),
                         value_new_string("normal"), value_ref(pos), value_ref(neg),
                         value_ref(latent), value_new_float(denoise)};
    struct value *out[4];
    char msg[256];
    if (run_node(&sd_ksampler, names, v, 10, out, msg, sizeof msg) < 0) {
        printf("# KSampler: %s\n", msg);
        return NULL;
    }
    return out[0];
}

static struct value *decode(struct value *vae, struct value *latent)
{
    const char *names[] = {"samples", "vae"};
    struct value *v[] = {value_ref(latent), value_ref(vae)};
    struct value *out[4];
    char msg[256];
    if (run_node(&sd_vae_decode, names, v, 2, out, msg, sizeof msg) < 0) {
        printf("# VAEDecode: %s\n", msg);
        return NULL;
    }
    return out[0];
}

/* A LoRA with one UNet module (level-0 attn1 to_q, 32x32) and one CLIP module. */
static void write_lora(const char *path)
{
    struct {
        const char *name;
        int64_t shape[2];
    } t[] = {
        {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_up.weight", {32, 4}},
        {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_down.weight", {4, 32}},
        {"lora_te_text_model_encoder_layers_1_mlp_fc1.lora_up.weight", {256, 4}},
        {"lora_te_text_model_encoder_layers_1_mlp_fc1.lora_down.weight", {4, 64}},
    };
    struct err e = {0};
    struct st_writer *w = st_writer_new();
    for (int i = 0; i < 4; i++)
        st_writer_add(w, t[i].name, ST_DTYPE_F32, 2, t[i].shape);
    if (st_writer_begin(w, path, &e) < 0)
        PANIC("lora: %s", e.msg);
    for (int i = 0; i < 4; i++) {
        size_t n = (size_t)(t[i].shape[0] * t[i].shape[1]);
        float *v = xmalloc(n * sizeof *v);
        for (size_t k = 0; k < n; k++)
            v[k] = 0.5f * sinf(0.37f * (float)k + (float)i);
        st_writer_write(w, v, n * 4, &e);
        xfree(v);
    }
    if (st_writer_finish(w, &e) < 0)
        PANIC("lora: %s", e.msg);
    st_writer_free(w);
}

static int image_ok(const struct value *img, int h, int w)
{
    if (!img || img->kind != VALUE_TENSOR || img->ndim != 4 || img->shape[1] != h ||
        img->shape[2] != w || img->shape[3] != 3)
        return 0;
    for (size_t i = 0; i < img->numel; i++)
        if (!(img->data[i] >= 0.0f && img->data[i] <= 1.0f))
            return 0;
    return 1;
}

static double image_diff(const struct value *a, const struct value *b)
{
    double m = 0;
    for (size_t i = 0; a && b && i < a->numel && i < b->numel; i++)
        m = fmax(m, fabs((double)a->data[i] - b->data[i]));
    return m;
}

static void gen_file(const char *path, uint64_t seed, unsigned flags)
{
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    o.seed = seed;
    o.flags = flags;
    o.dtype = ST_DTYPE_F16;
    struct err e = {0};
    if (ckpt_gen_write(&o, path, &e) < 0)
        PANIC("gen %s: %s", path, e.msg);
}

static struct value *load_vae(const char *name, char *msg, size_t msg_size)
{
    const char *n[] = {"vae_name"};
    struct value *v[] = {value_new_string(name)};
    struct value *out[4] = {0};
    if (run_node(&sd_vae_loader, n, v, 1, out, msg, msg_size) < 0)
        return NULL;
    return out[0];
}

/*
 * VAELoader: a standalone VAE of seed 7 (another seed than the checkpoint's 42)
 * decodes `lat` exactly as the VAE of a seed-7 checkpoint does, and unlike the
 * checkpoint's own VAE (`own`); its combo lists models/vae; bad files fail.
 */
static void test_vae_loader(const char *dir, struct value *lat, const struct value *own)
{
    char p[4][400], d[2][400], msg[1024];
    snprintf(d[0], sizeof d[0], "%s/vae", dir);
    snprintf(d[1], sizeof d[1], "%s/vae/sub", dir);
    mkdir(d[0], 0755);
    mkdir(d[1], 0755);
    snprintf(p[0], sizeof p[0], "%s/vae/mine.safetensors", dir);
    snprintf(p[1], sizeof p[1], "%s/vae/sub/diffusers.safetensors", dir);
    snprintf(p[2], sizeof p[2], "%s/vae/unet.safetensors", dir);
    snprintf(p[3], sizeof p[3], "%s/checkpoints/seed7.safetensors", dir);
    gen_file(p[0], 7, CKPT_GEN_VAE_ONLY | CKPT_GEN_VAE_BARE);
    gen_file(p[1], 7, CKPT_GEN_VAE_ONLY | CKPT_GEN_VAE_DIFFUSERS);
    gen_file(p[2], 7, CKPT_GEN_NO_VAE | CKPT_GEN_NO_CLIP);
    gen_file(p[3], 7, 0);

    struct node_strlist opts;
    node_strlist_init(&opts);
    node_input_options(&env, &sd_vae_loader.inputs[0], &opts);
    static const char *const want[] = {"mine.safetensors", "sub/diffusers.safetensors",
                                       "unet.safetensors", "pixel_space"};
    int same = opts.n == 4;
    for (size_t i = 0; same && i < 4; i++)
        same = strcmp(opts.items[i], want[i]) == 0;
    ok(same, "VAELoader vae_name lists models/vae then pixel_space (%zu options)", opts.n);
    node_strlist_release(&opts);

    struct value *mine = load_vae("mine.safetensors", msg, sizeof msg);
    ok(mine && sd_vae_of(mine), "VAELoader: bare-key VAE file (%s)", mine ? "ok" : msg);
    struct value *dif = load_vae("sub/diffusers.safetensors", msg, sizeof msg);
    ok(dif && sd_vae_of(dif), "VAELoader: diffusers VAE file (%s)", dif ? "ok" : msg);
    const char *cn[] = {"ckpt_name"};
    struct value *cv[] = {value_new_string("seed7.safetensors")};
    struct value *mcv[4] = {0};
    run_node(&sd_checkpoint_loader_simple, cn, cv, 1, mcv, NULL, 0);
    struct value *ia = mine ? decode(mine, lat) : NULL;
    struct value *ib = mcv[2] ? decode(mcv[2], lat) : NULL;
    struct value *ic = dif ? decode(dif, lat) : NULL;
    ok(ia && ib && ia->numel == ib->numel && image_diff(ia, ib) == 0.0,
       "VAELoader + VAEDecode: the same pixels as the seed-7 checkpoint's VAE");
    ok(ic && ib && ic->numel == ib->numel && image_diff(ic, ib) == 0.0,
       "diffusers-named VAE: the same pixels too");
    ok(ia && own && image_diff(ia, own) > 1e-3,
       "and other pixels than the seed-42 checkpoint's VAE (%.3g)", image_diff(ia, own));

    ok(!load_vae("unet.safetensors", msg, sizeof msg) && strstr(msg, "RuntimeError") &&
           strstr(msg, "unet.safetensors' is not a VAE") && strstr(msg, "UNet"),
       "a UNet file in models/vae: %s", msg);
    ok(!load_vae("nope.safetensors", msg, sizeof msg) &&
           strstr(msg, "FileNotFoundError: Model in folder 'vae' with filename "
                       "'nope.safetensors' not found."),
       "missing VAE: %s", msg);
    ok(!load_vae("pixel_space", msg, sizeof msg) && strstr(msg, "'pixel_space' is not supported"),
       "pixel_space: %s", msg);

    for (int i = 0; i < 4; i++) {
        value_unref(mcv[i]);
        unlink(p[i]);
    }
    value_unref(ia);
    value_unref(ib);
    value_unref(ic);
    value_unref(mine);
    value_unref(dif);
    rmdir(d[1]);
    rmdir(d[0]);
}

int main(void)
{
    long live0 = alloc_live_count();
    char dir[] = "/tmp/test_sd_pipeline.XXXXXX", sub[320], path[400];
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    mkdir(sub, 0755);
    snprintf(path, sizeof path, "%s/tiny.safetensors", sub);
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    struct err e = {0};
    EXPECT_OK(ckpt_gen_write(&o, path, &e));

    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    if (mm_new(&mc, &mm, &e) < 0) {
        ok(0, "mm_new: %s", e.msg);
        return harness_done();
    }
    env.models_dir = dir;
    env.mm = mm;
    env.preview_size = 512;

    /* A missing checkpoint: ComfyUI's FileNotFoundError text. */
    char msg[512];
    const char *cn[] = {"ckpt_name"};
    struct value *cv[] = {value_new_string("nope.safetensors")};
    int rc = run_node(&sd_checkpoint_loader_simple, cn, cv, 1, NULL, msg, sizeof msg);
    ok(rc < 0 && strstr(msg, "FileNotFoundError: Model in folder 'checkpoints' with filename "
                             "'nope.safetensors' not found."),
       "missing checkpoint: %s", msg);

    struct value *mcv[4] = {0};
    struct value *cv2[] = {value_new_string("tiny.safetensors")};
    rc = run_node(&sd_checkpoint_loader_simple, cn, cv2, 1, mcv, msg, sizeof msg);
    struct value *model = mcv[0], *clip = mcv[1], *vae = mcv[2];
    ok(rc == 0 && sd_model_of(model) && sd_clip_of(clip) && sd_vae_of(vae),
       "CheckpointLoaderSimple: MODEL, CLIP, VAE (%s)", rc ? msg : "ok");
    if (rc < 0)
        goto done;

    struct value *pos = encode(clip, "a (photo:1.2) of a cat");
    struct value *neg = encode(clip, "blurry");
    const struct sd_cond *pc = sd_cond_of(pos);
    ok(pc && pc->n == 1 && pc->entries[0].tokens == 77 &&
           pc->entries[0].dim == sd_clip_of(clip)->cfg.text[0].width && pc->entries[0].pooled,
       "CLIPTextEncode: [1, 77, width] with a pooled vector");

    /* CLIPSetLastLayer -2 changes the conditioning. */
    const char *ln[] = {"clip", "stop_at_clip_layer"};
    struct value *lv[] = {value_ref(clip), value_new_int(-2)};
    struct value *lo[4];
    run_node(&sd_clip_set_last_layer, ln, lv, 2, lo, NULL, 0);
    struct value *pos2 = encode(lo[0], "a (photo:1.2) of a cat");
    double cd = 0;
    for (int i = 0; pos2 && i < 77 * pc->entries[0].dim; i++)
        cd = fmax(cd, fabs(sd_cond_of(pos2)->entries[0].cond[i] - pc->entries[0].cond[i]));
    ok(pos2 && cd > 1e-3 && sd_clip_of(lo[0])->clip_skip == -2 && sd_clip_of(clip)->clip_skip == -1,
       "CLIPSetLastLayer -2: another conditioning (max diff %.3g), input CLIP unchanged", cd);

    const char *en[] = {"width", "height", "batch_size"};
    struct value *ev[] = {value_new_int(64), value_new_int(64), value_new_int(1)};
    struct value *eo[4];
    run_node(&sd_empty_latent_image, en, ev, 3, eo, NULL, 0);
    struct value *empty = eo[0];

    struct value *s1 = ksample(model, pos, neg, empty, 5, 1.0, "euler");
    struct value *s1b = ksample(model, pos, neg, empty, 5, 1.0, "euler");
    struct value *s2 = ksample(model, pos, neg, empty, 6, 1.0, "euler");
    struct value *img1 = s1 ? decode(vae, s1) : NULL;
    struct value *img1b = s1b ? decode(vae, s1b) : NULL;
    struct value *img2 = s2 ? decode(vae, s2) : NULL;
    ok(image_ok(img1, 64, 64), "txt2img 64x64, 3 euler steps, decoded to a [1,64,64,3] image");
    ok(img1 && img1b && image_diff(img1, img1b) == 0.0, "same seed: identical pixels");
    ok(img1 && img2 && image_diff(img1, img2) > 1e-3, "different seed: different pixels (%.3g)",
       image_diff(img1, img2));
    ok(mm_loaded_count(mm) >= 1, "models stay loaded between nodes (%d)", mm_loaded_count(mm));
    if (s1 && img1)
        test_vae_loader(dir, s1, img1);

    /* img2img: encode the image, denoise 0.5 with an ancestral sampler. */
    const char *vn[] = {"pixels", "vae"};
    struct value *vv[] = {value_ref(img1), value_ref(vae)};
    struct value *vo[4] = {0};
    rc = run_node(&sd_vae_encode, vn, vv, 2, vo, msg, sizeof msg);
    const struct sd_latent *enc = sd_latent_of(vo[0]);
    ok(rc == 0 && enc && enc->b == 1 && enc->c == 4 && enc->h == 8 && enc->w == 8,
       "VAEEncode: [1,4,8,8] (%s)", rc ? msg : "ok");
    struct value *s3 = enc ? ksample(model, pos, neg, vo[0], 5, 0.5, "euler_ancestral") : NULL;
    struct value *img3 = s3 ? decode(vae, s3) : NULL;
    ok(image_ok(img3, 64, 64) && image_diff(img3, img1) > 1e-4,
       "img2img denoise 0.5 runs and changes the image");

    /* VAEEncodeForInpaint: right half masked, grown by 6 -> noise mask from column 30. */
    struct value *mask = value_new_mask(1, 64, 64);
    for (int i = 0; i < 64 * 64; i++)
        mask->data[i] = (i % 64) >= 32 ? 1.0f : 0.0f;
    const char *ipn[] = {"pixels", "vae", "mask", "grow_mask_by"};
    struct value *ipv[] = {value_ref(img1), value_ref(vae), mask, value_new_int(6)};
    struct value *ipo[4] = {0};
    rc = run_node(&sd_vae_encode_for_inpaint, ipn, ipv, 4, ipo, msg, sizeof msg);
    const struct sd_latent *il = sd_latent_of(ipo[0]);
    int mask_ok = il && il->noise_mask && il->mb == 1 && il->mh == 64 && il->mw == 64;
    for (int y = 0; mask_ok && y < 64; y++)
        for (int x = 0; x < 64; x++)
            mask_ok &= il->noise_mask[y * 64 + x] == (x >= 30 ? 1.0f : 0.0f);
    double ld = 0;
    for (int i = 0; il && enc && i < 4 * 8 * 8; i++)
        ld = fmax(ld, fabs(il->samples[i] - enc->samples[i]));
    ok(rc == 0 && mask_ok && ld > 1e-4,
       "VAEEncodeForInpaint: grey-filled encode, noise mask grown to column 30 (%s)",
       rc ? msg : "ok");
    struct value *s4 = il ? ksample(model, pos, neg, ipo[0], 5, 1.0, "dpmpp_2m") : NULL;
    const struct sd_latent *o4 = sd_latent_of(s4);
    ok(o4 && o4->noise_mask && o4->mh == 64, "KSampler on the inpaint latent keeps its noise mask");
    value_unref(s4);
    value_unref(ipo[0]);

    /* VAEEncodeTiled: a 128x128 image in 64 px tiles with 16 px overlap; and one tile
     * covering everything, which must equal the plain encode (up to the /3 average). */
    struct value *big = value_new_image(1, 128, 128, 3);
    for (int y = 0; y < 128; y++)
        for (int x = 0; x < 128; x++)
            for (int k = 0; k < 3; k++)
                big->data[(y * 128 + x) * 3 + k] = img1->data[((y / 2) * 64 + x / 2) * 3 + k];
    const char *etn[] = {"pixels", "vae", "tile_size", "overlap", "temporal_size", "temporal_overlap"};
    struct value *etv[] = {value_ref(big), value_ref(vae), value_new_int(64), value_new_int(16),
                           value_new_int(64), value_new_int(8)};
    struct value *eto[4] = {0};
    rc = run_node(&sd_vae_encode_tiled, etn, etv, 6, eto, msg, sizeof msg);
    const struct sd_latent *tl = sd_latent_of(eto[0]);
    int fin = tl && tl->b == 1 && tl->c == 4 && tl->h == 16 && tl->w == 16;
    for (int i = 0; fin && i < 4 * 16 * 16; i++)
        fin = isfinite(tl->samples[i]);
    ok(rc == 0 && fin, "VAEEncodeTiled 128x128 in 64/16 tiles: finite [1,4,16,16] (%s)",
       rc ? msg : "ok");
    struct value *etv2[] = {value_ref(img1), value_ref(vae), value_new_int(512), value_new_int(64),
                            value_new_int(64), value_new_int(8)};
    struct value *eto2[4] = {0};
    run_node(&sd_vae_encode_tiled, etn, etv2, 6, eto2, NULL, 0);
    double td = 0;
    for (int i = 0; enc && sd_latent_of(eto2[0]) && i < 4 * 8 * 8; i++)
        td = fmax(td, fabs(sd_latent_of(eto2[0])->samples[i] - enc->samples[i]));
    ok(sd_latent_of(eto2[0]) && td < 1e-5, "VAEEncodeTiled with one tile equals VAEEncode (%.2g)", td);
    value_unref(eto[0]);
    value_unref(eto2[0]);
    value_unref(big);

    /* VAEDecodeTiled with 32 px tiles (4 latent px) and 8 px overlap. */
    const char *tn[] = {"samples", "vae", "tile_size", "overlap", "temporal_size", "temporal_overlap"};
    struct value *tv[] = {value_ref(s1), value_ref(vae), value_new_int(32), value_new_int(8),
                          value_new_int(64), value_new_int(8)};
    struct value *to[4] = {0};
    rc = run_node(&sd_vae_decode_tiled, tn, tv, 6, to, msg, sizeof msg);
    ok(rc == 0 && image_ok(to[0], 64, 64), "VAEDecodeTiled: [1,64,64,3] (%s)", rc ? msg : "ok");

    /* LoRA: strength 0 is the input itself, 1.0 changes the image, the base is untouched. */
    char ldir[320], lpath[400];
    snprintf(ldir, sizeof ldir, "%s/loras", dir);
    mkdir(ldir, 0755);
    snprintf(lpath, sizeof lpath, "%s/l.safetensors", ldir);
    write_lora(lpath);
    const char *lrn[] = {"model", "clip", "lora_name", "strength_model", "strength_clip"};
    struct value *l0v[] = {value_ref(model), value_ref(clip), value_new_string("l.safetensors"),
                           value_new_float(0.0), value_new_float(0.0)};
    struct value *l0[4] = {0};
    rc = run_node(&sd_lora_loader, lrn, l0v, 5, l0, msg, sizeof msg);
    ok(rc == 0 && l0[0] == model && l0[1] == clip, "LoraLoader at strength 0: inputs passed through");
    struct value *l1v[] = {value_ref(model), value_ref(clip), value_new_string("l.safetensors"),
                           value_new_float(1.0), value_new_float(1.0)};
    struct value *l1[4] = {0};
    rc = run_node(&sd_lora_loader, lrn, l1v, 5, l1, msg, sizeof msg);
    struct value *lpos = rc == 0 ? encode(l1[1], "a (photo:1.2) of a cat") : NULL;
    struct value *ls = lpos ? ksample(l1[0], lpos, neg, empty, 5, 1.0, "euler") : NULL;
    struct value *limg = ls ? decode(vae, ls) : NULL;
    ok(rc == 0 && limg && image_diff(limg, img1) > 1e-4,
       "LoraLoader at 1.0 changes the image (%.3g) (%s)", image_diff(limg, img1), rc ? msg : "ok");
    struct value *bs = ksample(model, pos, neg, empty, 5, 1.0, "euler");
    struct value *bimg = bs ? decode(vae, bs) : NULL;
    ok(bimg && image_diff(bimg, img1) == 0.0, "the unpatched MODEL still gives the same pixels");
    const char *lmn[] = {"model", "lora_name", "strength_model"};
    struct value *lmv[] = {value_ref(model), value_new_string("missing.safetensors"),
                           value_new_float(1.0)};
    rc = run_node(&sd_lora_loader_model_only, lmn, lmv, 3, NULL, msg, sizeof msg);
    ok(rc < 0 && strstr(msg, "FileNotFoundError: Model in folder 'loras'"),
       "LoraLoaderModelOnly with a missing file: %s", msg);
    value_unref(bimg);
    value_unref(bs);
    value_unref(limg);
    value_unref(ls);
    value_unref(lpos);
    for (int i = 0; i < 4; i++) {
        value_unref(l0[i]);
        value_unref(l1[i]);
    }
    unlink(lpath);
    rmdir(ldir);

    /* No memory manager: a clear error, not a crash. */
    env.mm = NULL;
    struct value *none = encode(clip, "x");
    ok(none == NULL, "CLIPTextEncode without a memory manager fails cleanly");
    env.mm = mm;

    value_unref(to[0]);
    value_unref(img3);
    value_unref(s3);
    value_unref(vo[0]);
    value_unref(img1);
    value_unref(img1b);
    value_unref(img2);
    value_unref(s1);
    value_unref(s1b);
    value_unref(s2);
    value_unref(empty);
    value_unref(pos2);
    value_unref(lo[0]);
    value_unref(pos);
    value_unref(neg);
    value_unref(model);
    value_unref(clip);
    value_unref(vae);
done:
    mm_unload_all(mm);
    mm_free(mm);
    unlink(path);
    rmdir(sub);
    rmdir(dir);
    tensor_shutdown();
    ok(alloc_live_count() == live0, "no allocation left live (%ld)", alloc_live_count() - live0);
    return harness_done();
}
