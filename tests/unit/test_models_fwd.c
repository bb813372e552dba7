/*
 * test_models_fwd — CLIP, UNet and VAE forward passes on the tiny random-weight
 * checkpoint (generated here, tools/ckpt_gen.c, seed 42, f32), compared with the
 * independent PyTorch reference's outputs (tools/reference_sd15.py, committed as
 * tests/fixtures/models/sd15_tiny_expected.txt: sampled values and mean |x|).
 * Also: f16/bf16 checkpoints give the same results within rounding, LoRA-free
 * patchers, and errors for bad shapes.
 * Arguments: fixtures dir, tokenizer dir.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "buf.h"
#include "ckpt_gen.h"
#include "harness.h"
#include "memmgr.h"
#include "checkpoint.h"
#include "vae_image.h"
#include "text_encoder.h"
#include "unet.h"
#include "vae.h"
#include "ref_fixture.h"

static const char *fixtures;

/* ---- the model under test ------------------------------------------------------------------ */

struct loaded {
    struct model_ckpt ck;
    struct patcher *p[3];
};

static int load(struct mm *mm, const char *path, struct loaded *L)
{
    struct err e = {0};
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    memset(L, 0, sizeof(*L));
    if (model_ckpt_load(path, MODEL_LOAD_ALL, f32, &L->ck, &e) < 0) {
        ok(0, "load %s: %s", path, e.msg);
        return -1;
    }
    struct mm_request req = {.n_models = 3, .activation_bytes = (size_t)256 << 20};
    for (int c = 0; c < 3; c++)
        req.models[c] = L->p[c] = patcher_new(L->ck.model[c]);
    struct mm_report rep;
    if (mm_load_models(mm, &req, &rep, &e) < 0) {
        ok(0, "mm_load_models: %s", e.msg);
        return -1;
    }
    return 0;
}

static void unload(struct mm *mm, struct loaded *L)
{
    for (int c = 0; c < 3; c++) {
        if (L->ck.model[c])
            mm_unload(mm, L->ck.model[c]);
        patcher_unref(L->p[c]);
    }
    model_ckpt_release(&L->ck);
}

static void test_clip(struct loaded *L, struct clip_tokenizer *tok)
{
    static const char *const prompts[] = {"a photo of a cat", "a photo of a cat",
                                          "a (red:1.5) cat, ((masterpiece)), [blue] sky", NULL};
    static const int skips[] = {-1, -2, -1, -1};
    struct buf longp;
    buf_init(&longp);
    buf_adds(&longp, "a ");
    for (int i = 0; i < 80; i++)
        buf_adds(&longp, "very ");
    buf_adds(&longp, "long prompt");
    static const char *const probe0[] = {"embeddings", "layer.0", NULL};
    for (int k = 0; k < 4; k++) {
        struct clip_tokens tk;
        clip_tokenize_prompt(tok, k == 3 ? longp.ptr : prompts[k], &tk);
        float *cond = NULL, *pooled = NULL;
        struct err e = {0};
        struct ref_probe pc = {.prefix = "clip0", .names = probe0, .tol = 1e-5};
        struct model_probe pr = {.fn = ref_on_probe, .user = &pc};
        int rc =
            text_encode(L->p[MODEL_CLIP], &L->ck.cfg.text[0], model_prefix(&L->ck.cfg, MODEL_CLIP),
                        &tk, &(struct text_encode_opts){.layer = skips[k], .norm_hidden = 1}, &cond,
                        &pooled, k == 0 ? &pr : NULL, &e);
        ok(rc == 0, "clip encode %d (%s)", k, e.msg);
        if (rc == 0) {
            char name[64];
            int64_t cs[3] = {1, (int64_t)tk.n_chunks * 77, L->ck.cfg.text[0].width};
            snprintf(name, sizeof(name), "clip%d.cond", k);
            ref_compare(name, cond, 3, cs, 1e-5);
            int64_t ps[1] = {L->ck.cfg.text[0].width};
            snprintf(name, sizeof(name), "clip%d.pooled", k);
            ref_compare(name, pooled, 1, ps, 1e-5);
        }
        xfree(cond);
        xfree(pooled);
        clip_tokens_release(&tk);
    }
    buf_release(&longp);
}

/* Textual inversion: embedding:myemb (2 vectors, weight 1.2) loads from the directory,
 * embedding:missing is warned about; the result matches the reference's. */
static void test_clip_embedding(struct loaded *L, struct clip_tokenizer *tok, const char *dir)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/myemb.safetensors", dir);
    int64_t D = L->ck.cfg.text[0].width, shape[2] = {2, D};
    float *v = xmalloc((size_t)(2 * D) * 4);
    ref_wave(v, 2 * D, 0.77, 0.2);
    struct st_writer *w = st_writer_new();
    struct err e = {0};
    st_writer_add(w, "emb_params", ST_DTYPE_F32, 2, shape);
    st_writer_begin(w, path, &e);
    st_writer_write(w, v, (uint64_t)(2 * D) * 4, &e);
    st_writer_finish(w, &e);
    st_writer_free(w);
    xfree(v);
    clip_tokenizer_set_embedding_dir(tok, dir);
    struct clip_tokens tk;
    clip_tokenize_prompt(tok, "a (embedding:myemb:1.2) photo, embedding:missing cat", &tk);
    ok(tk.n_embeds == 2 && tk.embed_width == D && tk.n_embedding_skipped == 1 &&
           tk.ids[2] == CLIP_EMBED_ID_BASE && tk.ids[3] == CLIP_EMBED_ID_BASE + 1 &&
           tk.weights[2] == 1.2f,
       "embedding:myemb gives 2 vector tokens at weight 1.2; embedding:missing skipped");
    float *cond = NULL, *pooled = NULL;
    int rc = text_encode(L->p[MODEL_CLIP], &L->ck.cfg.text[0], model_prefix(&L->ck.cfg, MODEL_CLIP),
                         &tk, &(struct text_encode_opts){.layer = -1, .norm_hidden = 1}, &cond,
                         &pooled, NULL, &e);
    ok(rc == 0, "clip encode with an embedding (%s)", e.msg);
    if (rc == 0) {
        int64_t cs[3] = {1, 77, D}, ps[1] = {D};
        ref_compare("clip4.cond", cond, 3, cs, 1e-5);
        ref_compare("clip4.pooled", pooled, 1, ps, 1e-5);
    }
    xfree(cond);
    xfree(pooled);
    clip_tokens_release(&tk);
    clip_tokenizer_set_embedding_dir(tok, NULL);
    unlink(path);
}

static void test_unet(struct loaded *L)
{
    static const char *const names[] = {"t_emb",
                                        "time_embed",
                                        "input_blocks.0",
                                        "input_blocks.1",
                                        "input_blocks.3",
                                        "input_blocks.4",
                                        "middle_block",
                                        "output_blocks.2",
                                        "output_blocks.11",
                                        "eps",
                                        NULL};
    struct {
        const char *name;
        int b, h, w, t;
        float ts[2];
    } cases[] = {{"unetA", 1, 8, 8, 77, {500, 0}}, {"unetB", 2, 9, 7, 154, {999, 1}}};
    struct dev *d = patcher_device(L->p[MODEL_UNET]);
    for (int c = 0; c < 2; c++) {
        int64_t xs[4] = {cases[c].b, 4, cases[c].h, cases[c].w};
        int64_t cs[3] = {cases[c].b, cases[c].t, L->ck.cfg.unet.ctx_dim};
        struct tensor *x = ref_new_wave(d, 4, xs, 0.37, 0.1),
                      *ctx = ref_new_wave(d, 3, cs, 0.011, 0.5);
        struct tensor *eps = NULL;
        struct err e = {0};
        tensor_new(d, TENSOR_F32, 4, xs, &eps, &e);
        struct ref_probe pc = {.prefix = cases[c].name, .names = names, .tol = 1e-4};
        struct model_probe pr = {.fn = ref_on_probe, .user = &pc};
        int rc =
            unet_eval(L->p[MODEL_UNET], &L->ck.cfg.unet, x, cases[c].ts, ctx, NULL, eps, &pr, &e);
        ok(rc == 0, "unet eval %s (%s)", cases[c].name, e.msg);
        tensor_free(x);
        tensor_free(ctx);
        tensor_free(eps);
    }
    /* Bad shapes are errors, not crashes. */
    int64_t xs[4] = {1, 3, 8, 8}, cs[3] = {1, 77, L->ck.cfg.unet.ctx_dim};
    struct tensor *x = ref_new_wave(d, 4, xs, 1, 0), *ctx = ref_new_wave(d, 3, cs, 1, 0),
                  *eps = NULL;
    struct err e = {0};
    tensor_new(d, TENSOR_F32, 4, xs, &eps, &e);
    float t = 10;
    ok(unet_eval(L->p[MODEL_UNET], &L->ck.cfg.unet, x, &t, ctx, NULL, eps, NULL, &e) ==
               ERR_INVALID &&
           strstr(e.msg, "bad shapes"),
       "unet with 3 latent channels: %s", e.msg);
    tensor_free(x);
    tensor_free(ctx);
    tensor_free(eps);
}

static void test_vae(struct loaded *L)
{
    struct dev *d = patcher_device(L->p[MODEL_VAE]);
    struct err e = {0};
    int64_t zs[4] = {1, 4, 5, 6}, is[4] = {1, 3, 40, 48};
    struct tensor *z = ref_new_wave(d, 4, zs, 0.23, 0.3), *img = NULL;
    tensor_new(d, TENSOR_F32, 4, is, &img, &e);
    static const char *const dn[] = {"decoder.mid", "decoder.up.3", "decoder.up.1", "decoder.out",
                                     NULL};
    struct ref_probe pc = {.prefix = "vaedec", .names = dn, .tol = 1e-4};
    struct model_probe pr = {.fn = ref_on_probe, .user = &pc};
    ok(vae_decode(L->p[MODEL_VAE], &L->ck.cfg.vae, z, img, &pr, &e) == 0, "vae decode (%s)", e.msg);

    int64_t es[4] = {1, 3, 32, 40}, ms[4] = {1, 4, 4, 5};
    struct tensor *im = ref_new_wave(d, 4, es, 0.051, 0.2), *mean = NULL;
    tensor_new(d, TENSOR_F32, 4, ms, &mean, &e);
    static const char *const en[] = {"encoder.down.0", "encoder.down.3", "encoder.mid", "moments",
                                     NULL};
    struct ref_probe pe = {.prefix = "vaeenc", .names = en, .tol = 1e-4};
    struct model_probe pr2 = {.fn = ref_on_probe, .user = &pe};
    ok(vae_encode(L->p[MODEL_VAE], &L->ck.cfg.vae, im, mean, &pr2, &e) == 0, "vae encode (%s)",
       e.msg);
    ref_compare_tensor("vaeenc.mean", mean, 1e-4);

    /* Round trip: encode(clamp(decode(z))) has the latent's shape and matches the reference. */
    struct tensor *cl = NULL, *m2 = NULL;
    tensor_new_like(img, TENSOR_F32, &cl, &e);
    tensor_clamp(cl, img, -1, 1, &e);
    tensor_new(d, TENSOR_F32, 4, zs, &m2, &e);
    ok(vae_encode(L->p[MODEL_VAE], &L->ck.cfg.vae, cl, m2, NULL, &e) == 0, "round trip encode");
    ref_compare_tensor("vaert.mean", m2, 2e-4);
    ok(vae_encode(L->p[MODEL_VAE], &L->ck.cfg.vae, z, m2, NULL, &e) == ERR_INVALID,
       "encode of a 4-channel input refused");
    err_clear(&e);
    /* Tiled decode (batch 2, 7x9 latents, tile 4, overlap 1) and tiled encode (48x64,
     * tile 32, overlap 8) against the reference's tiled versions. */
    int64_t zts[4] = {2, 4, 7, 9}, its[4] = {2, 3, 56, 72};
    struct tensor *zt = ref_new_wave(d, 4, zts, 0.19, 0.4), *dt = NULL;
    tensor_new(d, TENSOR_F32, 4, its, &dt, &e);
    ok(vae_decode_tiled(L->p[MODEL_VAE], &L->ck.cfg.vae, zt, dt, 4, 1, &e) == 0,
       "tiled decode (%s)", e.msg);
    ref_compare_tensor("vaetiled.dec", dt, 1e-4);
    int64_t ies[4] = {1, 3, 48, 64}, mes[4] = {1, 4, 6, 8};
    struct tensor *ie = ref_new_wave(d, 4, ies, 0.043, 0.6), *me = NULL;
    tensor_new(d, TENSOR_F32, 4, mes, &me, &e);
    ok(vae_encode_tiled(L->p[MODEL_VAE], &L->ck.cfg.vae, ie, me, 32, 8, &e) == 0,
       "tiled encode (%s)", e.msg);
    ref_compare_tensor("vaetiled.enc", me, 1e-4);
    ok(vae_encode_tiled(L->p[MODEL_VAE], &L->ck.cfg.vae, ie, me, 30, 8, &e) == ERR_INVALID,
       "tiled encode with tile 30 refused");
    tensor_free(zt);
    tensor_free(dt);
    tensor_free(ie);
    tensor_free(me);
    tensor_free(cl);
    tensor_free(m2);
    tensor_free(z);
    tensor_free(img);
    tensor_free(im);
    tensor_free(mean);
}

/* UNet case A's eps for a checkpoint stored as `sdt`, loaded with UNet dtype `udt`. */
static int eps_for(struct mm *mm, const char *dir, enum st_dtype sdt, enum tensor_dtype udt,
                   float *out)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/d%d.safetensors", dir, (int)sdt);
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    o.dtype = sdt;
    o.flags = CKPT_GEN_NO_VAE | CKPT_GEN_NO_CLIP;
    struct err e = {0};
    struct model_ckpt ck;
    enum tensor_dtype dts[3] = {udt, TENSOR_F32, TENSOR_F32};
    int rc = ckpt_gen_write(&o, path, &e);
    if (rc == 0)
        rc = model_ckpt_load(path, MODEL_LOAD_UNET, dts, &ck, &e);
    unlink(path);
    if (rc < 0) {
        printf("# %s\n", e.msg);
        return rc;
    }
    struct patcher *p = patcher_new(ck.model[MODEL_UNET]);
    struct mm_request req = {.n_models = 1, .models = {p}, .activation_bytes = 64 << 20};
    struct mm_report rep;
    rc = mm_load_models(mm, &req, &rep, &e);
    struct dev *d = patcher_device(p);
    int64_t xs[4] = {1, 4, 8, 8}, cs[3] = {1, 77, ck.cfg.unet.ctx_dim};
    struct tensor *x = ref_new_wave(d, 4, xs, 0.37, 0.1), *ctx = ref_new_wave(d, 3, cs, 0.011, 0.5),
                  *eps = NULL;
    float t = 500;
    tensor_new(d, TENSOR_F32, 4, xs, &eps, &e);
    if (rc == 0)
        rc = unet_eval(p, &ck.cfg.unet, x, &t, ctx, NULL, eps, NULL, &e);
    if (rc == 0)
        rc = tensor_read_f32(eps, out, 256, &e);
    if (rc < 0)
        printf("# %s\n", e.msg);
    tensor_free(x);
    tensor_free(ctx);
    tensor_free(eps);
    mm_unload(mm, ck.model[MODEL_UNET]);
    patcher_unref(p);
    model_ckpt_release(&ck);
    return rc;
}

static double rel_diff(const float *a, const float *b, int n)
{
    double m = 0, s = 0;
    for (int i = 0; i < n; i++) {
        m = fmax(m, fabs(a[i] - b[i]));
        s += fabs(b[i]) / n;
    }
    return m / s;
}

/* fp16 / bf16 checkpoints: kept in their dtype (borrowed, converted per op) or converted
 * to f32 at load give the same eps; and both stay near the f32 checkpoint's. */
static void test_dtypes(struct mm *mm, const char *dir)
{
    float ref[256], a[256], b[256];
    if (eps_for(mm, dir, ST_DTYPE_F32, TENSOR_F32, ref) < 0) {
        ok(0, "f32 eps");
        return;
    }
    static const enum st_dtype sdts[2] = {ST_DTYPE_F16, ST_DTYPE_BF16};
    static const enum tensor_dtype tdts[2] = {TENSOR_F16, TENSOR_BF16};
    for (int i = 0; i < 2; i++) {
        int r1 = eps_for(mm, dir, sdts[i], tdts[i], a),
            r2 = eps_for(mm, dir, sdts[i], TENSOR_F32, b);
        ok(r1 == 0 && r2 == 0 && rel_diff(a, b, 256) < 1e-5,
           "%s checkpoint: same eps kept as %s or converted to f32 (%.2e)", st_dtype_name(sdts[i]),
           tensor_dtype_name(tdts[i]), r1 == 0 && r2 == 0 ? rel_diff(a, b, 256) : -1.0);
        double dd = rel_diff(b, ref, 256);
        ok(r2 == 0 && dd < (i == 0 ? 3e-2 : 0.2) && dd > 0,
           "%s checkpoint eps near the f32 checkpoint's (%.2e)", st_dtype_name(sdts[i]), dd);
    }
}

/* Pixel conventions (§4.4): clamp((x+1)/2), channels last; centre crop to multiples of
 * 8 and 2p-1; truncating 8-bit conversion. */
static void test_image(struct dev *d)
{
    struct err e = {0};
    int64_t s[4] = {1, 3, 1, 2};
    struct tensor *t = NULL, *enc = NULL;
    tensor_new(d, TENSOR_F32, 4, s, &t, &e);
    float v[6] = {-3, 0.5f, -1, 1, 0, 7}; /* planes: R = {-3, .5}, G = {-1, 1}, B = {0, 7} */
    tensor_write_f32(t, v, 6, &e);
    float out[6];
    EXPECT_OK(vae_image_from_decoder(t, out, &e));
    ok(out[0] == 0 && out[1] == 0 && out[2] == 0.5f && out[3] == 0.75f && out[4] == 1 &&
           out[5] == 1,
       "decoder output -> clamp((x+1)/2), channels last");
    tensor_free(t);
    int H = 10, W = 13;
    float *pix = xmalloc((size_t)H * W * 3 * 4);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++)
                pix[(y * W + x) * 3 + c] = (float)(y * 100 + x * 3 + c) / 2048.0f;
    EXPECT_OK(vae_image_to_encoder(d, pix, 1, H, W, &enc, &e));
    if (enc) {
        float got[3 * 64];
        tensor_read_f32(enc, got, 3 * 64, &e);
        /* crop offset y (10 % 8) / 2 = 1, x (13 % 8) / 2 = 2 */
        int y = 3, x = 5, c = 2;
        float want = 2.0f * (float)((y + 1) * 100 + (x + 2) * 3 + c) / 2048.0f - 1.0f;
        ok(enc->shape[2] == 8 && enc->shape[3] == 8 && got[c * 64 + y * 8 + x] == want,
           "encoder input: centre crop to 8x8 and 2p-1");
    }
    tensor_free(enc);
    xfree(pix);
    ok(vae_image_to_encoder(d, out, 1, 1, 2, &enc, &e) == ERR_INVALID, "a 2x1 image is refused");
    float f[5] = {0.999f, 1.0f, 0.5f, -0.2f, 1.7f};
    uint8_t u[5];
    vae_image_to_u8(f, 5, u);
    ok(u[0] == 254 && u[1] == 255 && u[2] == 127 && u[3] == 0 && u[4] == 255,
       "8-bit conversion truncates (254 255 127 0 255)");
}

/* The plan functions bound the activation bytes the passes really allocate (device
 * peak minus what was live before), and not by much. */
static void test_plan_bytes(struct loaded *L)
{
    struct dev *d = patcher_device(L->p[MODEL_UNET]);
    struct err e = {0};
    int shapes[3][3] = {{1, 8, 8}, {2, 9, 7}, {2, 16, 24}};
    for (int i = 0; i < 3; i++) {
        int b = shapes[i][0], h = shapes[i][1], w = shapes[i][2];
        int64_t xs[4] = {b, 4, h, w}, cs[3] = {b, 77, L->ck.cfg.unet.ctx_dim};
        struct tensor *x = ref_new_wave(d, 4, xs, 0.1, 0), *c = ref_new_wave(d, 3, cs, 0.2, 0),
                      *o = NULL;
        tensor_new(d, TENSOR_F32, 4, xs, &o, &e);
        float t[2] = {10, 20};
        size_t used = dev_bytes_used(d);
        dev_peak_reset(d);
        unet_eval(L->p[MODEL_UNET], &L->ck.cfg.unet, x, t, c, NULL, o, NULL, &e);
        size_t got = dev_bytes_peak(d) - used, plan = unet_plan_bytes(&L->ck.cfg.unet, b, h, w, 77);
        ok(got <= plan && plan <= got + got / 3 + (1 << 20),
           "unet %dx%dx%d: plan %zu bytes bounds the peak %zu tightly", b, h, w, plan, got);
        tensor_free(x);
        tensor_free(c);
        tensor_free(o);
        int64_t zs[4] = {1, 4, h, w}, is[4] = {1, 3, 8 * h, 8 * w};
        struct tensor *z = ref_new_wave(d, 4, zs, 0.1, 0), *img = NULL;
        tensor_new(d, TENSOR_F32, 4, is, &img, &e);
        used = dev_bytes_used(d);
        dev_peak_reset(d);
        vae_decode(L->p[MODEL_VAE], &L->ck.cfg.vae, z, img, NULL, &e);
        got = dev_bytes_peak(d) - used;
        plan = vae_plan_bytes(&L->ck.cfg.vae, 1, h, w);
        ok(got <= plan && plan <= got + got / 3 + (1 << 20),
           "vae decode %dx%d: plan %zu bytes bounds the peak %zu tightly", h, w, plan, got);
        if (h % 8 == 0 && w % 8 == 0) {
            struct tensor *m = NULL;
            int64_t ms[4] = {1, 4, h / 8, w / 8};
            tensor_new(d, TENSOR_F32, 4, ms, &m, &e);
            struct tensor *ii = NULL;
            int64_t is2[4] = {1, 3, h, w};
            tensor_new_zeros(d, TENSOR_F32, 4, is2, &ii, &e);
            used = dev_bytes_used(d);
            dev_peak_reset(d);
            vae_encode(L->p[MODEL_VAE], &L->ck.cfg.vae, ii, m, NULL, &e);
            got = dev_bytes_peak(d) - used;
            ok(got <= vae_plan_bytes(&L->ck.cfg.vae, 1, h / 8, w / 8),
               "vae encode %dx%d: within the plan (%zu)", h, w, got);
            tensor_free(m);
            tensor_free(ii);
        }
        tensor_free(z);
        tensor_free(img);
    }
}

/* A device budget too small for a whole 256x256 decode: plain decode reports
 * ERR_DEVICE_OOM (no crash, nothing leaked), the auto path falls back to tiles and gives
 * exactly the explicit tiled result. */
static void test_vae_oom(const char *path)
{
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "sim:40M";
    struct mm *mm = NULL;
    struct err e = {0};
    if (mm_new(&mc, &mm, &e) < 0) {
        ok(0, "mm_new sim: %s", e.msg);
        return;
    }
    struct model_ckpt ck;
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    if (model_ckpt_load(path, MODEL_LOAD_VAE, f32, &ck, &e) < 0) {
        ok(0, "load vae: %s", e.msg);
        mm_free(mm);
        return;
    }
    struct patcher *p = patcher_new(ck.model[MODEL_VAE]);
    struct mm_request req = {.n_models = 1, .models = {p}, .activation_bytes = 1 << 20};
    struct mm_report rep;
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    struct dev *d = patcher_device(p);
    int64_t zs[4] = {1, 4, 32, 32}, is[4] = {1, 3, 256, 256};
    struct tensor *z = ref_new_wave(d, 4, zs, 0.29, 0.1), *a = NULL, *b = NULL;
    tensor_new(d, TENSOR_F32, 4, is, &a, &e);
    tensor_new(d, TENSOR_F32, 4, is, &b, &e);
    err_clear(&e);
    int rc = vae_decode(p, &ck.cfg.vae, z, a, NULL, &e);
    ok(rc == ERR_DEVICE_OOM, "whole decode over the 40M budget: ERR_DEVICE_OOM (%s)", e.msg);
    err_clear(&e);
    ok(vae_decode_auto(p, &ck.cfg.vae, z, a, 8, 2, &e) == 0, "auto decode falls back to tiles (%s)",
       e.msg);
    ok(vae_decode_tiled(p, &ck.cfg.vae, z, b, 8, 2, &e) == 0, "explicit tiled decode");
    float *va = xmalloc(256 * 256 * 3 * 4), *vb = xmalloc(256 * 256 * 3 * 4);
    tensor_read_f32(a, va, 256 * 256 * 3, &e);
    tensor_read_f32(b, vb, 256 * 256 * 3, &e);
    ok(memcmp(va, vb, 256 * 256 * 3 * 4) == 0, "auto result equals the tiled decode");
    xfree(va);
    xfree(vb);
    tensor_free(z);
    tensor_free(a);
    tensor_free(b);
    mm_node_end(mm, &rep);
    mm_unload(mm, ck.model[MODEL_VAE]);
    patcher_unref(p);
    model_ckpt_release(&ck);
    mm_free(mm);
}

int main(int argc, char **argv)
{
    fixtures = argc > 1 ? argv[1] : "tests/fixtures/models";
    const char *tokdir = argc > 2 ? argv[2] : NULL;
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    ref_fixture_load(fixtures, "sd15_tiny_expected.txt");
    char dir[] = "/tmp/test_models_fwd.XXXXXX";
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    char path[256];
    snprintf(path, sizeof(path), "%s/tiny.safetensors", dir);
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    struct err e = {0};
    EXPECT_OK(ckpt_gen_write(&o, path, &e));
    struct clip_tokenizer *tok = NULL;
    EXPECT_OK(clip_tokenizer_load(tokdir, &tok, &e));
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    if (mm_new(&mc, &mm, &e) < 0) {
        ok(0, "mm_new: %s", e.msg);
        return harness_done();
    }
    struct loaded L;
    if (load(mm, path, &L) == 0) {
        test_clip(&L, tok);
        test_clip_embedding(&L, tok, dir);
        test_unet(&L);
        test_vae(&L);
        test_plan_bytes(&L);
        test_image(patcher_device(L.p[MODEL_VAE]));
    }
    unload(mm, &L);
    test_vae_oom(path);
    test_dtypes(mm, dir);
    mm_free(mm);
    clip_tokenizer_free(tok);
    unlink(path);
    rmdir(dir);
    ref_fixture_free();
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
