/*
 * test_models_vae — standalone VAE files (model_vae_load): bare LDM keys,
 * first_stage_model.* keys, diffusers keys, and a full checkpoint, in f32, f16
 * and bf16. A VAE file generated with seed 7 must decode a latent to exactly the
 * pixels of the VAE of a seed-7 checkpoint loaded through model_ckpt_load (the
 * generator's values depend only on the checkpoint name), and a seed-42 one must
 * not. Files that are not VAEs fail with messages naming the file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "harness.h"
#include "memmgr.h"
#include "checkpoint.h"
#include "checkpoint_impl.h"
#include "text_encoder.h"
#include "unet.h"
#include "vae.h"
#include "family.h"

static char dir[] = "/tmp/test_models_vae.XXXXXX";
static struct mm *mm;

#define ZH 5
#define ZW 6
#define NPIX (3 * 8 * ZH * 8 * ZW)

static const char *tmp(const char *name)
{
    static char p[8][300];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
    return p[k];
}

static const char *gen(const char *name, uint64_t seed, enum st_dtype dt, unsigned flags,
                       const char *extra)
{
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    o.seed = seed;
    o.dtype = dt;
    o.flags = flags;
    o.extra_tensor = extra;
    struct err e = {0};
    const char *p = tmp(name);
    if (ckpt_gen_write(&o, p, &e) < 0)
        PANIC("gen %s: %s", name, e.msg);
    return p;
}

/* Decode a fixed 1x4x5x6 latent with the VAE of `ck` into px[NPIX]. */
static int decode(struct model_ckpt *ck, float *px)
{
    struct err e = {0};
    struct patcher *p = patcher_new(ck->model[MODEL_VAE]);
    struct mm_request req = {.n_models = 1, .activation_bytes = (size_t)128 << 20};
    req.models[0] = p;
    struct mm_report rep;
    int rc = mm_load_models(mm, &req, &rep, &e);
    struct tensor *z = NULL, *img = NULL;
    int64_t zs[4] = {1, 4, ZH, ZW}, is[4] = {1, 3, 8 * ZH, 8 * ZW};
    if (rc == 0)
        rc = tensor_new(patcher_device(p), TENSOR_F32, 4, zs, &z, &e);
    if (rc == 0)
        rc = tensor_new(patcher_device(p), TENSOR_F32, 4, is, &img, &e);
    if (rc == 0) {
        float zv[4 * ZH * ZW];
        for (int i = 0; i < 4 * ZH * ZW; i++)
            zv[i] = (float)((i * 37 % 23) - 11) / 9.0f;
        rc = tensor_write_f32(z, zv, 4 * ZH * ZW, &e);
    }
    if (rc == 0)
        rc = vae_decode(p, &ck->cfg.vae, z, img, NULL, &e);
    if (rc == 0)
        rc = tensor_read_f32(img, px, NPIX, &e);
    if (rc < 0)
        printf("# decode: %s\n", e.msg);
    tensor_free(z);
    tensor_free(img);
    mm_unload(mm, ck->model[MODEL_VAE]);
    patcher_unref(p);
    return rc;
}

/* Pixels of the VAE in `path`, loaded as a standalone VAE (vae_file) or a checkpoint. */
static int pixels(const char *path, int vae_file, enum tensor_dtype dt, float *px)
{
    struct model_ckpt ck;
    struct err e = {0};
    const enum tensor_dtype d3[3] = {dt, dt, dt};
    int rc = vae_file ? model_vae_load(path, dt, &ck, &e)
                      : model_ckpt_load(path, MODEL_LOAD_VAE, d3, &ck, &e);
    if (rc < 0) {
        printf("# load %s: %s\n", path, e.msg);
        return rc;
    }
    ok(ck.model[MODEL_UNET] == NULL && ck.model[MODEL_CLIP] == NULL && ck.model[MODEL_VAE],
       "%s: only the VAE is built", path);
    rc = decode(&ck, px);
    model_ckpt_release(&ck);
    return rc;
}

static void test_names(void)
{
    static const char *const cases[][2] = {
        {"encoder.down.1.block.0.nin_shortcut.weight",
         "encoder.down_blocks.1.resnets.0.conv_shortcut.weight"},
        {"decoder.up.1.block.2.conv1.bias", "decoder.up_blocks.2.resnets.2.conv1.bias"},
        {"decoder.up.3.upsample.conv.weight", "decoder.up_blocks.0.upsamplers.0.conv.weight"},
        {"encoder.down.2.downsample.conv.bias", "encoder.down_blocks.2.downsamplers.0.conv.bias"},
        {"decoder.mid.block_2.norm1.weight", "decoder.mid_block.resnets.1.norm1.weight"},
        {"encoder.mid.attn_1.proj_out.weight", "encoder.mid_block.attentions.0.to_out.0.weight"},
        {"decoder.mid.attn_1.norm.bias", "decoder.mid_block.attentions.0.group_norm.bias"},
        {"encoder.norm_out.weight", "encoder.conv_norm_out.weight"},
        {"post_quant_conv.weight", "post_quant_conv.weight"},
        {"decoder.conv_in.weight", "decoder.conv_in.weight"},
    };
    char out[200];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        EXPECT_EQ(vae_name_to_diffusers(cases[i][0], out, sizeof(out)), 0);
        EXPECT_STR(out, cases[i][1]);
    }
    EXPECT_EQ(vae_name_to_diffusers("model.diffusion_model.out.0.weight", out, sizeof(out)),
              -1);
}

/* Every VAE key of the tiny and the SD1.5 layouts: LDM -> diffusers -> the loader's name. */
struct rt {
    int n, bad;
};

static void on_vae_key(void *user, const struct model_key *k)
{
    struct rt *r = user;
    if (k->comp != MODEL_VAE)
        return;
    char dif[200], back[300];
    const char *rel = k->name + strlen(MODEL_PREFIX_VAE);
    r->n++;
    if (vae_name_to_diffusers(rel, dif, sizeof(dif)) < 0 ||
        !ckpt__vae_file_name(dif, back, sizeof(back)) || strcmp(back, k->name) != 0 ||
        !ckpt__vae_file_name(rel, back, sizeof(back)) || strcmp(back, k->name) != 0) {
        if (r->bad++ < 3)
            printf("# round trip of '%s' via '%s' gave '%s'\n", k->name, dif, back);
    }
}

static void test_name_round_trip(void)
{
    struct model_config c;
    for (int canon = 0; canon < 2; canon++) {
        canon ? sd15_config_canonical(&c) : sd15_config_tiny(&c);
        struct rt r = {0};
        model_layout_build(&c, on_vae_key, &r);
        ok(r.n > 200 && r.bad == 0, "%s layout: %d VAE names survive LDM -> diffusers -> loader",
           canon ? "SD1.5" : "tiny", r.n);
    }
    /* The older diffusers attention names, and names the loader leaves alone. */
    static const char *const old[][2] = {
        {"encoder.mid_block.attentions.0.query.weight", "first_stage_model.encoder.mid.attn_1.q.weight"},
        {"decoder.mid_block.attentions.0.key.bias", "first_stage_model.decoder.mid.attn_1.k.bias"},
        {"decoder.mid_block.attentions.0.value.weight", "first_stage_model.decoder.mid.attn_1.v.weight"},
        {"encoder.mid_block.attentions.0.proj_attn.bias",
         "first_stage_model.encoder.mid.attn_1.proj_out.bias"},
        {"quant_conv.weight", "first_stage_model.quant_conv.weight"},
    };
    char out[300];
    for (size_t i = 0; i < sizeof(old) / sizeof(old[0]); i++) {
        EXPECT_EQ(ckpt__vae_file_name(old[i][0], out, sizeof(out)), 1);
        EXPECT_STR(out, old[i][1]);
    }
    EXPECT_EQ(ckpt__vae_file_name("first_stage_model.encoder.conv_in.weight", out, sizeof(out)), 0);
    EXPECT_EQ(ckpt__vae_file_name("model.diffusion_model.out.2.weight", out, sizeof(out)), 0);
    EXPECT_EQ(ckpt__vae_file_name("lora_unet_x.lora_up.weight", out, sizeof(out)), 0);
}

static int same(const float *a, const float *b)
{
    return memcmp(a, b, NPIX * sizeof(float)) == 0;
}

static void test_pixels(void)
{
    float *ref = xmalloc(NPIX * sizeof(float)), *px = xmalloc(NPIX * sizeof(float));
    const char *ck7 = gen("ck7.safetensors", 7, ST_DTYPE_F32, 0, NULL);
    const char *ck42 = gen("ck42.safetensors", 42, ST_DTYPE_F32, 0, NULL);
    EXPECT_OK(pixels(ck7, 0, TENSOR_F32, ref));
    double sum = 0;
    for (int i = 0; i < NPIX; i++)
        sum += ref[i] < 0 ? -ref[i] : ref[i];
    ok(sum > 1e-3 * NPIX, "reference decode is not trivial (mean |x| %g)", sum / NPIX);

    static const struct {
        const char *name;
        unsigned flags;
    } f32s[] = {
        {"vae_bare.safetensors", CKPT_GEN_VAE_ONLY | CKPT_GEN_VAE_BARE},
        {"vae_prefixed.safetensors", CKPT_GEN_VAE_ONLY},
        {"vae_diffusers.safetensors", CKPT_GEN_VAE_ONLY | CKPT_GEN_VAE_DIFFUSERS},
        {"vae_bare_2d_extras.safetensors",
         CKPT_GEN_VAE_ONLY | CKPT_GEN_VAE_BARE | CKPT_GEN_CONV_2D | CKPT_GEN_METADATA},
    };
    for (size_t i = 0; i < sizeof(f32s) / sizeof(f32s[0]); i++) {
        const char *p = gen(f32s[i].name, 7, ST_DTYPE_F32, f32s[i].flags, NULL);
        ok(pixels(p, 1, TENSOR_F32, px) == 0 && same(px, ref),
           "%s (seed 7) decodes exactly as the seed-7 checkpoint's VAE", f32s[i].name);
        unlink(p);
    }
    /* A full checkpoint through VAELoader gives its VAE. */
    ok(pixels(ck7, 1, TENSOR_F32, px) == 0 && same(px, ref), "full checkpoint as a VAE file");
    /* The test can fail: another seed's VAE decodes differently. */
    const char *v42 = gen("vae42.safetensors", 42, ST_DTYPE_F32,
                          CKPT_GEN_VAE_ONLY | CKPT_GEN_VAE_BARE, NULL);
    ok(pixels(v42, 1, TENSOR_F32, px) == 0 && !same(px, ref), "a seed-42 VAE differs");
    float *ref42 = xmalloc(NPIX * sizeof(float));
    ok(pixels(ck42, 0, TENSOR_F32, ref42) == 0 && same(px, ref42),
       "the seed-42 VAE equals the seed-42 checkpoint's");
    xfree(ref42);
    unlink(v42);

    /* f16 / bf16 files, each naming, against the same dtype through the checkpoint path
     * (a first_stage_model.* file is a checkpoint holding only a VAE). */
    static const enum st_dtype dts[] = {ST_DTYPE_F16, ST_DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        const char *pre = gen("h_pre.safetensors", 7, dts[d], CKPT_GEN_VAE_ONLY, NULL);
        EXPECT_OK(pixels(pre, 0, TENSOR_F32, ref));
        const unsigned fl[] = {CKPT_GEN_VAE_BARE, CKPT_GEN_VAE_DIFFUSERS, 0};
        for (int k = 0; k < 3; k++) {
            const char *p = gen("h.safetensors", 7, dts[d], CKPT_GEN_VAE_ONLY | fl[k], NULL);
            ok(pixels(p, 1, TENSOR_F32, px) == 0 && same(px, ref), "%s VAE, naming %d: same pixels",
               st_dtype_name(dts[d]), k);
            unlink(p);
        }
        unlink(pre);
    }
    unlink(ck7);
    unlink(ck42);
    xfree(ref);
    xfree(px);
}

static void expect_error(const char *path, int code, const char *n1, const char *n2)
{
    struct model_ckpt ck;
    struct err e = {0};
    int rc = model_vae_load(path, TENSOR_F32, &ck, &e);
    ok(rc == code, "%s: error %d (got %d: %s)", path, code, rc, e.msg);
    ok(strstr(e.msg, path) != NULL, "message names the file: %s", e.msg);
    ok(!n1 || strstr(e.msg, n1), "message says '%s'", n1 ? n1 : "");
    ok(!n2 || strstr(e.msg, n2), "message says '%s'", n2 ? n2 : "");
    if (rc == 0)
        model_ckpt_release(&ck);
}

static void test_errors(void)
{
    /* A LoRA file. */
    const char *lora = tmp("lora.safetensors");
    struct st_writer *w = st_writer_new();
    int64_t sh[2] = {4, 8};
    st_writer_add(w, "lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight", ST_DTYPE_F32,
                  2, sh);
    struct err e = {0};
    float zeros[32] = {0};
    EXPECT_OK(st_writer_begin(w, lora, &e));
    EXPECT_OK(st_writer_write(w, zeros, sizeof(zeros), &e));
    EXPECT_OK(st_writer_finish(w, &e));
    st_writer_free(w);
    expect_error(lora, ERR_INVALID, "is not a VAE", "LoRA");
    unlink(lora);

    /* Some other model's encoder.* tensors (a T5 encoder). */
    const char *t5 = tmp("t5.safetensors");
    w = st_writer_new();
    st_writer_add(w, "encoder.block.0.layer.0.SelfAttention.q.weight", ST_DTYPE_F32, 2, sh);
    EXPECT_OK(st_writer_begin(w, t5, &e));
    EXPECT_OK(st_writer_write(w, zeros, sizeof(zeros), &e));
    EXPECT_OK(st_writer_finish(w, &e));
    st_writer_free(w);
    expect_error(t5, ERR_INVALID, "is not a VAE", "encoder.block.0.layer.0.SelfAttention.q.weight");
    unlink(t5);

    /* A UNet-only file. */
    const char *unet = gen("unet.safetensors", 7, ST_DTYPE_F16, CKPT_GEN_NO_VAE | CKPT_GEN_NO_CLIP,
                           NULL);
    expect_error(unet, ERR_INVALID, "is not a VAE", "UNet");
    unlink(unet);

    /* Incomplete and mangled VAEs name the tensor. */
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    o.flags = CKPT_GEN_VAE_ONLY | CKPT_GEN_VAE_BARE;
    o.drop_tensor = "first_stage_model.decoder.up.2.block.1.conv2.bias";
    const char *drop = tmp("drop.safetensors");
    EXPECT_OK(ckpt_gen_write(&o, drop, &e));
    expect_error(drop, ERR_INVALID, "missing", "decoder.up.2.block.1.conv2.bias");
    unlink(drop);
    const char *extra = gen("extra.safetensors", 7, ST_DTYPE_F32,
                            CKPT_GEN_VAE_ONLY | CKPT_GEN_VAE_DIFFUSERS,
                            "decoder.up_blocks.0.attentions.0.to_q.weight");
    expect_error(extra, ERR_INVALID, "unexpected tensor",
                 "'decoder.up_blocks.0.attentions.0.to_q.weight'");
    unlink(extra);
    const char *nan = tmp("nan.safetensors");
    o.drop_tensor = NULL;
    o.nan_tensor = "decoder.conv_out.weight"; /* the written (bare) name */
    EXPECT_OK(ckpt_gen_write(&o, nan, &e));
    expect_error(nan, ERR_INVALID, "NaN", "decoder.conv_out.weight");
    unlink(nan);
    expect_error(tmp("absent.safetensors"), ERR_NOT_FOUND, NULL, NULL);
}

int main(void)
{
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct err e = {0};
    if (mm_new(&mc, &mm, &e) < 0) {
        ok(0, "mm_new: %s", e.msg);
        return harness_done();
    }
    test_names();
    test_name_round_trip();
    test_pixels();
    test_errors();
    mm_free(mm);
    rmdir(dir);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
