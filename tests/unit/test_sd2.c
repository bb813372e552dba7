/*
 * test_sd2 — the SD2.x family (models/family/family_sd2.c) on tiny generated checkpoints
 * (gen_ckpt --arch sd2 / sd2-v layout), against the float64 reference tools/reference_sd2.py
 * (tests/fixtures/models/sd2_tiny_expected.txt):
 *   - detection: both files are SD2.x (the OpenCLIP-H marker; shrunk widths), the 768-v
 *     weights say v-prediction and the 512 ones epsilon (SD20.model_type's std test), and
 *     a MODEL over each carries that sampling type; real-size headers over sparse zero
 *     data are canonical SD2.x by context width alone, 768-v when the probe's std is 0.2;
 *   - CLIPTextEncode through the SD2 CLIP (penultimate layer with the final norm, pad 0,
 *     the projected pooled output), also after CLIPSetLastLayer(-1) and with emphasis;
 *   - SDXL's "v_pred" / "ztsnr" marker keys: v-prediction and the zsnr table;
 *   - one v-prediction denoise step: the UNet (Linear projections, 64-wide heads, no ADM)
 *     on x / sqrt(sigma^2 + 1) at the nearest timestep, and x0 from V_PREDICTION.
 * Tolerances as the SD1.5/SDXL references: 1e-5 text, 1e-4 UNet. Argument: fixtures dir.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "buf.h"
#include "checkpoint.h"
#include "checkpoint_impl.h"
#include "ckpt_gen.h"
#include "family.h"
#include "harness.h"
#include "memmgr.h"
#include "ref_fixture.h"
#include "safetensors.h"
#include "sampling_sched.h"
#include "sd_backend.h"
#include "sd_types.h"
#include "unet.h"

static char dir[] = "/tmp/test_sd2.XXXXXX";

static int gen(const char *name, int vpred, char *path, size_t size)
{
    struct ckpt_gen_opts o;
    struct err e = {0};
    ckpt_gen_opts_default(&o);
    sd2_config_tiny(&o.cfg);
    o.cfg.prediction = vpred;
    snprintf(path, size, "%s/%s", dir, name);
    int rc = ckpt_gen_write(&o, path, &e);
    ok(rc == 0, "generate %s (%s)", name, rc ? e.msg : "ok");
    return rc;
}

static void test_detect(const char *path, int vpred)
{
    struct model_config c;
    struct err e = {0};
    int rc = model_ckpt_probe(path, &c, &e);
    ok(rc == 0, "probe %s (%s)", path, rc ? e.msg : "ok");
    if (rc < 0)
        return;
    EXPECT_EQ(c.family, MODEL_FAMILY_SD2);
    EXPECT_EQ(c.prediction, vpred);
    EXPECT_EQ(c.unet.linear_proj, 1);
    EXPECT_EQ(c.unet.head_dim, 64);
    EXPECT_EQ(c.text[0].naming, TEXT_NAMING_OPENCLIP);
    EXPECT_EQ(c.text[0].proj_dim, 64);
    ok(!model_config_is_canonical(&c), "a shrunk SD2 is not canonical");
    struct model_config k;
    sd2_config_canonical(&k);
    k.prediction = 1;
    ok(model_config_is_canonical(&k), "SD2 768-v's knobs are canonical SD2");
}

/* ---- canonical widths, as sparse files ---- */

struct hdr {
    struct buf json;
    uint64_t off;       /* bytes of data so far */
    uint64_t probe_off; /* data offset of the v-prediction probe tensor */
    int64_t probe_n;
};

/* One F16 tensor in the file's naming (OpenCLIP for the text encoder). */
static void hdr_key(void *user, const struct model_key *k)
{
    struct hdr *h = user;
    char name[200], rel[160];
    snprintf(name, sizeof(name), "%s", k->name);
    if (k->comp == MODEL_CLIP) {
        text_name_to_file(TEXT_NAMING_OPENCLIP, k->name + k->rel, rel, sizeof(rel));
        snprintf(name, sizeof(name), "%.*s%s", k->rel, k->name, rel);
    }
    uint64_t n = 1;
    buf_printf(&h->json, "%s\"%s\":{\"dtype\":\"F16\",\"shape\":[", h->json.len > 1 ? "," : "",
               name);
    for (int i = 0; i < k->ndim; i++) {
        buf_printf(&h->json, "%s%lld", i ? "," : "", (long long)k->shape[i]);
        n *= (uint64_t)k->shape[i];
    }
    if (strcmp(name, MODEL_PREFIX_UNET "output_blocks.11.1.transformer_blocks.0.norm1.bias") == 0) {
        h->probe_off = h->off;
        h->probe_n = (int64_t)n;
    }
    buf_printf(&h->json, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)h->off,
               (unsigned long long)(h->off + 2 * n));
    h->off += 2 * n;
}

/*
 * A real-size SD2 checkpoint's header (the canonical layout in OpenCLIP naming, F16) over
 * zero data of the right length, a sparse file: detection sees ComfyUI's real case,
 * context 1024 without the shrunk files' marker rule. With `vpred` the probe tensor gets
 * values of std 0.2 (768-v), else it stays 0 (512).
 */
static int write_sparse_sd2(const char *path, int vpred)
{
    struct model_config c;
    struct hdr h = {.off = 0};
    sd2_config_canonical(&c);
    buf_init(&h.json);
    buf_adds(&h.json, "{");
    model_layout_build(&c, hdr_key, &h);
    buf_adds(&h.json, "}");
    while ((h.json.len + 8) % 8)
        buf_adds(&h.json, " ");
    FILE *fp = fopen(path, "wb");
    uint64_t hl = h.json.len;
    int rc = fp ? 0 : -1;
    if (fp) {
        fwrite(&hl, 8, 1, fp); /* little-endian host */
        fwrite(h.json.ptr, 1, h.json.len, fp);
        if (vpred && h.probe_n > 0) {
            fseek(fp, (long)(8 + hl + h.probe_off), SEEK_SET);
            for (int64_t i = 0; i < h.probe_n; i++) {
                uint16_t v = st_f32_to_f16(i % 2 ? 0.2f : -0.2f);
                fwrite(&v, 2, 1, fp);
            }
        }
        rc = fflush(fp) == 0 && ftruncate(fileno(fp), (off_t)(8 + hl + h.off)) == 0 ? 0 : -1;
        fclose(fp);
    }
    buf_release(&h.json);
    return rc;
}

static int keep_name(const char *name, unsigned flags, char *buf, size_t size)
{
    (void)name, (void)flags, (void)buf, (void)size;
    return 0;
}

static void test_canonical(void)
{
    char p[96];
    for (int v = 0; v < 2; v++) {
        struct model_config c, k;
        struct err e = {0};
        snprintf(p, sizeof(p), "%s/sd2_full_%d.safetensors", dir, v);
        if (write_sparse_sd2(p, v) < 0) {
            ok(0, "write %s", p);
            continue;
        }
        /* Detection alone (the UNet's knobs, family and prediction), without model_ckpt_probe's
         * value checks of 2.6 GB of zeros. */
        struct st_file *f = NULL;
        struct ntable nt = {0};
        int rc = st_open(p, &f, &e);
        if (rc == 0) {
            ckpt__ntable_build(f, keep_name, 0, &nt);
            rc = ckpt__detect(f, &nt, MODEL_LOAD_UNET | MODEL_LOAD_VAE, &c, &e);
            ckpt__ntable_release(&nt);
            st_close(f);
        }
        ok(rc == 0, "detect a real-size SD2 %s (%s)", v ? "768-v" : "512", rc ? e.msg : "ok");
        sd2_config_canonical(&k);
        k.prediction = v;
        ok(rc == 0 && memcmp(&c, &k, sizeof(c)) == 0 && model_config_is_canonical(&c),
           "real-size SD2 %s: canonical SD2.x knobs, prediction %d (got %d)", v ? "768-v" : "512",
           v, c.prediction);
        unlink(p);
    }
}

/*
 * SDXL's v-prediction markers (ComfyUI's SDXL.model_type): top-level "v_pred" (and
 * "ztsnr") keys, as CheckpointSave writes them; a MODEL over such a file samples v on the
 * zero-terminal-SNR table.
 */
static void test_sdxl_vpred(void)
{
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    for (int k = 0; k < 3; k++) { /* plain, v_pred, v_pred + ztsnr */
        struct ckpt_gen_opts o;
        struct model_ckpt ck;
        struct err e = {0};
        char p[96];
        ckpt_gen_opts_default(&o);
        sdxl_config_tiny(&o.cfg);
        o.cfg.prediction = k > 0;
        o.cfg.zsnr = k > 1;
        snprintf(p, sizeof(p), "%s/sdxl_v%d.safetensors", dir, k);
        if (ckpt_gen_write(&o, p, &e) < 0 || model_ckpt_load(p, MODEL_LOAD_UNET, f32, &ck, &e) < 0) {
            ok(0, "generate and load %s: %s", p, e.msg);
            continue;
        }
        ok(ck.cfg.family == MODEL_FAMILY_SDXL && ck.cfg.prediction == (k > 0) &&
               ck.cfg.zsnr == (k > 1),
           "SDXL %d: prediction %d, zsnr %d", k, ck.cfg.prediction, ck.cfg.zsnr);
        struct sd_model *m = sd_unet_model_new(patcher_new(ck.model[MODEL_UNET]), &ck.cfg);
        ok(m->ms.prediction == (k > 0 ? SAMPLING_PREDICTION_V : SAMPLING_PREDICTION_EPS) &&
               m->ms.zsnr == (k > 1) && (k > 1) == (m->ms.sigma_max > 4000.0f),
           "SDXL %d: the MODEL samples %s (sigma_max %g)", k, k ? "v" : "eps", m->ms.sigma_max);
        sd_model_free(m);
        model_ckpt_release(&ck);
        unlink(p);
    }
}

static void compare_cond(const char *name, const struct sd_cond *c)
{
    char pn[64];
    if (!c || c->n != 1) {
        ok(0, "%s: one entry", name);
        return;
    }
    const struct sd_cond_entry *en = &c->entries[0];
    int64_t cs[3] = {en->batch, en->tokens, en->dim}, ps[1] = {en->pooled_dim};
    snprintf(pn, sizeof(pn), "%s.cond", name);
    ref_compare(pn, en->cond, 3, cs, 1e-5);
    snprintf(pn, sizeof(pn), "%s.pooled", name);
    if (en->pooled)
        ref_compare(pn, en->pooled, 1, ps, 1e-5);
    else
        ok(0, "%s: no pooled output", name);
}

static void test_text(struct sd_clip *clip, struct mm *mm)
{
    static const char *const prompts[] = {"a photo of a cat", "a photo of a cat",
                                          "a (red:1.5) cat, ((masterpiece)), [blue] sky"};
    static const int layers[] = {0, -1, 0}; /* 0: the family's default (penultimate) */
    for (int k = 0; k < 3; k++) {
        char name[16];
        struct sd_cond *c = NULL;
        struct err e = {0};
        clip->clip_skip = layers[k];
        clip->clip_skip_set = layers[k] != 0;
        snprintf(name, sizeof(name), "sd2_%d", k);
        int rc = sd_clip_encode_text(clip, mm, prompts[k], &c, &e);
        ok(rc == 0, "%s: CLIPTextEncode on the SD2 CLIP (%s)", name, rc ? e.msg : "ok");
        compare_cond(name, c);
        sd_cond_free(c);
    }
}

/* reference_sd2.py's UNET_SIGMAS, batch 2 on a 9x7 latent, a 77-token wave context. */
static void test_vpred_step(struct patcher *p, const struct model_config *cfg)
{
    const int B = 2, H = 9, W = 7, T = 77, n1 = 4 * H * W;
    const float sig[2] = {14.614642f, 0.8f};
    struct dev *d = patcher_device(p);
    struct sampling_discrete ms;
    struct err e = {0};
    int64_t xs[4] = {B, 4, H, W}, cs[3] = {B, T, cfg->unet.ctx_dim}, ts_shape[1] = {B};
    float *x = xmalloc((size_t)B * n1 * sizeof *x), *xin = xmalloc((size_t)B * n1 * sizeof *xin);
    float *out = xmalloc((size_t)B * n1 * sizeof *out), *x0 = xmalloc((size_t)B * n1 * sizeof *x0);
    float ts[2];
    sampling_discrete_init(&ms, family_sd2.sampling.linear_start, family_sd2.sampling.linear_end);
    ms.prediction = cfg->prediction;
    ref_wave(x, (long)B * n1, 0.37, 0.1);
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < n1; i++)
            x[b * n1 + i] *= 3.0f;
        sampling_model_input(&ms, x + b * n1, sig[b], xin + b * n1, (size_t)n1);
        ts[b] = (float)sampling_discrete_timestep(&ms, sig[b]);
    }
    ref_compare("sd2v.t", ts, 1, ts_shape, 0);
    struct tensor *xt = NULL, *ctx = ref_new_wave(d, 3, cs, 0.011, 0.5), *eps = NULL;
    EXPECT_OK(tensor_new(d, TENSOR_F32, 4, xs, &xt, &e));
    EXPECT_OK(tensor_write_f32(xt, xin, (size_t)B * n1, &e));
    EXPECT_OK(tensor_new(d, TENSOR_F32, 4, xs, &eps, &e));
    int rc = unet_eval(p, &cfg->unet, xt, ts, ctx, NULL, eps, NULL, &e);
    ok(rc == 0, "SD2 unet eval (%s)", rc ? e.msg : "ok");
    if (rc == 0) {
        ref_compare_tensor("sd2v.out", eps, 1e-4);
        EXPECT_OK(tensor_read_f32(eps, out, (size_t)B * n1, &e));
        for (int b = 0; b < B; b++) {
            struct sampling_denoiser dn;
            sampling_denoiser_at(&ms, sig[b], &dn);
            for (int i = 0; i < n1; i++)
                x0[b * n1 + i] = sampling_denoised(&dn, x[b * n1 + i], out[b * n1 + i]);
        }
        ref_compare("sd2v.x0", x0, 4, xs, 1e-4);
    }
    tensor_free(xt);
    tensor_free(ctx);
    tensor_free(eps);
    xfree(x);
    xfree(xin);
    xfree(out);
    xfree(x0);
}

static void test_loaded(const char *path)
{
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt ck;
    struct err e = {0};
    if (model_ckpt_load(path, MODEL_LOAD_ALL, f32, &ck, &e) < 0) {
        ok(0, "load the tiny SD2 768-v: %s", e.msg);
        return;
    }
    struct mm_config mc;
    struct mm *mm = NULL;
    struct sd_clip *clip = NULL;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    EXPECT_OK(mm_new(&mc, &mm, &e));
    EXPECT_OK(sd_clip_new(patcher_new(ck.model[MODEL_CLIP]), &ck.cfg, &clip, &e));
    if (clip)
        test_text(clip, mm);
    sd_clip_free(clip);
    mm_unload(mm, ck.model[MODEL_CLIP]);

    struct patcher *up = patcher_new(ck.model[MODEL_UNET]);
    patcher_ref(up); /* one reference for the MODEL, one for the eval below */
    struct sd_model *m = sd_unet_model_new(up, &ck.cfg);
    EXPECT_EQ(m->ms.prediction, SAMPLING_PREDICTION_V);
    EXPECT_EQ(m->family->id, MODEL_FAMILY_SD2);
    struct mm_request req = {.activation_bytes = (size_t)256 << 20, .n_models = 1,
                             .models = {up}};
    struct mm_report rep;
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    test_vpred_step(up, &ck.cfg);
    sd_model_free(m);
    mm_unload(mm, ck.model[MODEL_UNET]);
    patcher_unref(up);
    mm_free(mm);
    model_ckpt_release(&ck);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_sd2 FIXTURE_DIR\n");
        return 2;
    }
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    ref_fixture_load(argv[1], "sd2_tiny_expected.txt");
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    char pv[96], pe[96];
    if (gen("sd2v.safetensors", 1, pv, sizeof(pv)) == 0 &&
        gen("sd2.safetensors", 0, pe, sizeof(pe)) == 0) {
        test_detect(pv, 1);
        test_detect(pe, 0);
        test_canonical();
        test_sdxl_vpred();
        test_loaded(pv);
    }
    unlink(pv);
    unlink(pe);
    rmdir(dir);
    ref_fixture_free();
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
