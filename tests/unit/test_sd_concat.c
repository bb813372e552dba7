/*
 * test_sd_concat — the concat-conditioned UNets (inpainting 9 channels, instruct-pix2pix 8)
 * from the file to the sampler:
 *   - detection: SD1.5 / SDXL 9 and 8 channels, SD2.x 9 (epsilon even with 768-v-like
 *     weights: SD20.model_type reads only 4-channel UNets) load with their concat kind;
 *     SD2.x 8, the refiner 9 and SD1.5 5 are refused naming the family and channels;
 *   - the UNet with 9 / 8 input channels against the float64 reference (ref_unet64.c);
 *   - c_concat (sd_concat.c) against values computed here: the mask resized with a naive
 *     float64 bilinear (align_corners False) and rounded, the latent x 0.18215 for
 *     inpainting and as stored for ip2p, the defaults without a mask (ones | the black
 *     image's latent) or image (zeros), resize_to_batch_size's picks;
 *   - KSampler with a stand-in model of each kind: every call's x_in carries the entry's
 *     c_concat after the 4 latent channels (an area's slice of it for an area entry and its
 *     same-area twin, the latent's noise mask and the latent when the entry sets nothing);
 *   - InpaintModelConditioning and InstructPixToPixConditioning on a tiny checkpoint: the
 *     mask resized and cropped as ComfyUI (float64 reference), the grey image's and the
 *     original's latents equal VAEEncode's of images built here, noise_mask on/off, every
 *     entry keeps its other keys; bad inputs are node errors; KSampler runs the tiny 9- and
 *     8-channel SD1.5, 9-channel SD2 and 9- and 8-channel SDXL UNets with them (finite, and
 *     the concat matters), and a ControlNet on the 9-channel SD1.5.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "checkpoint.h"
#include "ckpt_gen.h"
#include "family.h"
#include "harness.h"
#include "memmgr.h"
#include "node_registry.h"
#include "node_run.h"
#include "patcher.h"
#include "ref_unet64.h"
#include "safetensors.h"
#include "sd_backend.h"
#include "sd_concat.h"
#include "sd_nodes.h"
#include "sd_types.h"
#include "tensor.h"
#include "unet.h"

static char dir[64], ckdir[128];
static struct node_env env;

/* ---- helpers -------------------------------------------------------------------------- */

/* A tiny file of cfg (flags: CKPT_GEN_*) into models/<folder>/name. */
static void gen_in(const char *folder, const char *name, const struct model_config *cfg,
                   unsigned flags)
{
    struct ckpt_gen_opts o;
    struct err e = {0};
    char path[256];
    ckpt_gen_opts_default(&o);
    o.cfg = *cfg;
    o.flags = flags;
    snprintf(path, sizeof path, "%s/%s", dir, folder);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", dir, folder, name);
    if (ckpt_gen_write(&o, path, &e) < 0)
        PANIC("gen '%s': %s", path, e.msg);
}

static void gen(const char *name, const struct model_config *cfg)
{
    gen_in("checkpoints", name, cfg, 0);
}

/* Run cls with inputs by name (references taken over); outputs in out[0..3]. */
static int run_node(const struct node_class *cls, const char *const *names, struct value **vals,
                    int n, struct value **out, char *msg, size_t msg_size)
{
    struct value *in[16] = {0}, *outs[4] = {0};
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

/* torch F.interpolate bilinear, align_corners False, in float64: src [b, sh, sw] -> [b, h, w]. */
static void bilinear64(const float *src, int b, int sh, int sw, int h, int w, double *out)
{
    for (int n = 0; n < b; n++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                double sy = fmax((y + 0.5) * sh / h - 0.5, 0), sx = fmax((x + 0.5) * sw / w - 0.5, 0);
                int y0 = (int)sy, x0 = (int)sx, y1 = y0 + 1 < sh ? y0 + 1 : y0,
                    x1 = x0 + 1 < sw ? x0 + 1 : x0;
                double ly = sy - y0, lx = sx - x0;
                const float *s = src + (size_t)n * sh * sw;
                out[((size_t)n * h + y) * w + x] =
                    (1 - ly) * ((1 - lx) * s[y0 * sw + x0] + lx * s[y0 * sw + x1]) +
                    ly * ((1 - lx) * s[y1 * sw + x0] + lx * s[y1 * sw + x1]);
            }
}

static void wave(float *v, size_t n, double a, double b, double amp, double off)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(off + amp * sin(a * (double)i + b));
}

/* ---- detection ------------------------------------------------------------------------ */

static void probe(const char *name, const struct model_config *cfg, struct model_config *out,
                  int *rc, struct err *e)
{
    char path[256];
    gen(name, cfg);
    snprintf(path, sizeof path, "%s/%s", ckdir, name);
    err_clear(e);
    *rc = model_ckpt_probe(path, out, e);
    unlink(path);
}

static void test_detect(void)
{
    static const struct {
        const char *name;
        void (*tiny)(struct model_config *);
        int in_ch, family, concat;
        const char *refused;
    } cases[] = {
        {"sd15_in9.safetensors", sd15_config_tiny, 9, MODEL_FAMILY_SD15, MODEL_CONCAT_INPAINT, NULL},
        {"sd15_in8.safetensors", sd15_config_tiny, 8, MODEL_FAMILY_SD15, MODEL_CONCAT_IP2P, NULL},
        {"sd2_in9.safetensors", sd2_config_tiny, 9, MODEL_FAMILY_SD2, MODEL_CONCAT_INPAINT, NULL},
        {"sdxl_in9.safetensors", sdxl_config_tiny, 9, MODEL_FAMILY_SDXL, MODEL_CONCAT_INPAINT, NULL},
        {"sdxl_in8.safetensors", sdxl_config_tiny, 8, MODEL_FAMILY_SDXL, MODEL_CONCAT_IP2P, NULL},
        {"sd2_in8.safetensors", sd2_config_tiny, 8, 0, 0, "SD2.x UNet with 8 input channels"},
        {"ref_in9.safetensors", sdxl_refiner_config_tiny, 9, 0, 0,
         "SDXL refiner UNet with 9 input channels"},
        {"sd15_in5.safetensors", sd15_config_tiny, 5, 0, 0, "SD1.5 UNet with 5 input channels"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct model_config cfg, got;
        struct err e = {0};
        int rc;
        cases[i].tiny(&cfg);
        cfg.unet.in_ch = cases[i].in_ch;
        probe(cases[i].name, &cfg, &got, &rc, &e);
        if (cases[i].refused) {
            ok(rc == ERR_UNSUPPORTED && strstr(e.msg, cases[i].refused) &&
                   strstr(e.msg, cases[i].name),
               "%s refused: %s", cases[i].name, e.msg);
            continue;
        }
        const struct model_family *f = rc == 0 ? model_family_get(got.family) : NULL;
        ok(rc == 0 && got.family == cases[i].family && got.unet.in_ch == cases[i].in_ch &&
               got.unet.out_ch == 4 && model_family_concat(f, got.unet.in_ch) == cases[i].concat &&
               model_config_is_canonical(&got) == 0,
           "%s: %s with %d input channels, concat kind %d (%s)", cases[i].name, f ? f->name : "?",
           got.unet.in_ch, f ? model_family_concat(f, got.unet.in_ch) : -1, rc ? e.msg : "ok");
    }
    /* SD20.model_type: "SD2.0 inpainting models are not v prediction" */
    struct model_config cfg, got;
    struct err e = {0};
    int rc;
    sd2_config_tiny(&cfg);
    cfg.prediction = 1;
    probe("sd2v_4.safetensors", &cfg, &got, &rc, &e);
    ok(rc == 0 && got.prediction == 1, "control: the 4-channel SD2 file with v weights is v");
    cfg.unet.in_ch = 9;
    probe("sd2v_9.safetensors", &cfg, &got, &rc, &e);
    ok(rc == 0 && got.prediction == 0, "the 9-channel SD2 file with the same weights is epsilon");
    ok(model_concat_channels(MODEL_CONCAT_NONE) == 0 &&
           model_concat_channels(MODEL_CONCAT_INPAINT) == 5 &&
           model_concat_channels(MODEL_CONCAT_IP2P) == 4,
       "concat channels 0, 5, 4");
}

/* ---- the UNet with concat channels against float64 -------------------------------------- */

#define H 8
#define WD 8
#define T 8

static void test_unet(struct mm *mm, int in_ch)
{
    struct model_config cfg;
    struct err e = {0};
    char name[64], path[256];
    sd15_config_tiny(&cfg);
    cfg.unet.in_ch = in_ch;
    snprintf(name, sizeof name, "unet_in%d.safetensors", in_ch);
    gen(name, &cfg);
    snprintf(path, sizeof path, "%s/%s", ckdir, name);
    static const enum tensor_dtype dt[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt ck;
    EXPECT_OK(model_ckpt_load(path, MODEL_LOAD_UNET, dt, &ck, &e));
    struct patcher *unet = patcher_new(ck.model[MODEL_UNET]);
    struct mm_request req = {.n_models = 1, .models = {unet},
                             .activation_bytes = unet_plan_bytes(&ck.cfg.unet, 1, H, WD, T)};
    struct mm_report rep;
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    struct dev *d = patcher_device(unet);
    float xs[9 * H * WD], cs[T * 64];
    wave(xs, (size_t)in_ch * H * WD, 0.37, 0.1, 0.8, 0);
    wave(cs, T * 64, 0.11, 0.7, 0.8, 0);
    struct tensor *x = NULL, *ctx = NULL, *eps = NULL;
    EXPECT_OK(tensor_new(d, TENSOR_F32, 4, (const int64_t[]){1, in_ch, H, WD}, &x, &e));
    EXPECT_OK(tensor_write_f32(x, xs, (int64_t)in_ch * H * WD, &e));
    EXPECT_OK(tensor_new(d, TENSOR_F32, 3, (const int64_t[]){1, T, 64}, &ctx, &e));
    EXPECT_OK(tensor_write_f32(ctx, cs, T * 64, &e));
    EXPECT_OK(tensor_new(d, TENSOR_F32, 4, (const int64_t[]){1, 4, H, WD}, &eps, &e));
    float t = 421.0f;
    EXPECT_OK(unet_eval(unet, &ck.cfg.unet, x, &t, ctx, NULL, eps, NULL, &e));

    struct act rx = ref_act_new(in_ch, H, WD);
    double rctx[T * 64];
    for (int i = 0; i < in_ch * H * WD; i++)
        rx.v[i] = xs[i];
    for (int i = 0; i < T * 64; i++)
        rctx[i] = cs[i];
    struct st_file *f = NULL;
    EXPECT_OK(st_open(path, &f, &e));
    ref_file = f;
    ref_prefix = "model.diffusion_model.";
    ref_ctx = rctx;
    ref_tokens = T;
    ref_ctx_dim = 64;
    ref_heads = ck.cfg.unet.heads;
    struct act re = ref_unet(&ck.cfg.unet, &rx, t, NULL);
    float got[4 * H * WD];
    EXPECT_OK(tensor_read_f32(eps, got, 4 * H * WD, &e));
    double num = 0, den = 1e-12;
    for (int i = 0; i < 4 * H * WD; i++) {
        num = fmax(num, fabs(got[i] - re.v[i]));
        den = fmax(den, fabs(re.v[i]));
    }
    ok(re.c == 4 && num / den < 2e-4,
       "%d-channel UNet eps equals the float64 reference (max error / max |ref| %.2e)", in_ch,
       num / den);
    /* the concat channels take part: another c_concat, another eps */
    xs[5 * H * WD + 3] += 1.0f;
    EXPECT_OK(tensor_write_f32(x, xs, (int64_t)in_ch * H * WD, &e));
    float got2[4 * H * WD];
    EXPECT_OK(unet_eval(unet, &ck.cfg.unet, x, &t, ctx, NULL, eps, NULL, &e));
    EXPECT_OK(tensor_read_f32(eps, got2, 4 * H * WD, &e));
    ok(memcmp(got, got2, sizeof got) != 0, "a changed concat channel changes eps");
    /* a 4-channel x is refused, not read past */
    struct tensor *x4 = NULL;
    EXPECT_OK(tensor_new(d, TENSOR_F32, 4, (const int64_t[]){1, 4, H, WD}, &x4, &e));
    err_clear(&e);
    ok(unet_eval(unet, &ck.cfg.unet, x4, &t, ctx, NULL, eps, NULL, &e) == ERR_INVALID,
       "a 4-channel input to the %d-channel UNet: %s", in_ch, e.msg);
    ref_act_free(&re);
    ref_act_free(&rx);
    st_close(f);
    tensor_free(x4);
    tensor_free(x);
    tensor_free(ctx);
    tensor_free(eps);
    mm_node_end(mm, &rep);
    patcher_unref(unet);
    model_ckpt_release(&ck);
    unlink(path);
}

/* ---- c_concat ---------------------------------------------------------------------------- */

static const double blank[4] = {0.8223, -0.6876, 0.6364, 0.1380};

static void test_resize_batch(void)
{
    float src[5];
    float out[5];
    for (int i = 0; i < 5; i++)
        src[i] = (float)i;
    sd_concat_resize_batch(src, 5, 1, out, 3);
    ok(out[0] == 0 && out[1] == 2 && out[2] == 4, "5 -> 3 picks 0, 2, 4");
    sd_concat_resize_batch(src, 4, 1, out, 3); /* round(1.5) = 2 (half to even), round(3) */
    ok(out[0] == 0 && out[1] == 2 && out[2] == 3, "4 -> 3 picks 0, 2, 3");
    sd_concat_resize_batch(src, 2, 1, out, 5); /* floor((i + .5) * .4) */
    ok(out[0] == 0 && out[1] == 0 && out[2] == 1 && out[3] == 1 && out[4] == 1,
       "2 -> 5 picks 0, 0, 1, 1, 1");
    sd_concat_resize_batch(src, 3, 1, out, 1);
    ok(out[0] == 0, "3 -> 1 keeps the first");
}

/*
 * The expected inpaint concat of a mask [mb, mh, mw] (NULL: none) and image latent
 * [ib, 4, ih, iw] (already scaled) at batch B, h x w; *skipped counts mask values within
 * 1e-4 of a rounding tie (left unchecked: float32 interpolation may fall either side).
 */
static void expect_inpaint(const float *mask, int mb, int mh, int mw, const float *img, int ib,
                           int ih, int iw, int B, int h, int w, double *out, unsigned char *tie)
{
    double *m = mask ? xmalloc((size_t)mb * h * w * sizeof *m) : NULL;
    double *im = xmalloc((size_t)ib * 4 * h * w * sizeof *im);
    if (mask)
        bilinear64(mask, mb, mh, mw, h, w, m);
    bilinear64(img, ib * 4, ih, iw, h, w, im);
    for (int b = 0; b < B; b++) {
        int bm = mb > 0 ? (int)floor((b + 0.5) * mb / B) : 0, bi = (int)floor((b + 0.5) * ib / B);
        if (mb == B)
            bm = b;
        if (ib == B)
            bi = b;
        for (int p = 0; p < h * w; p++) {
            double v = mask ? m[(size_t)bm * h * w + p] : 1.0;
            tie[(size_t)b * 5 * h * w + p] = mask && fabs(v - floor(v) - 0.5) < 1e-4;
            out[(size_t)b * 5 * h * w + p] = mask ? nearbyint(v) : 1.0;
            for (int c = 0; c < 4; c++) {
                out[((size_t)b * 5 + 1 + c) * h * w + p] =
                    mask ? im[((size_t)bi * 4 + c) * h * w + p] : blank[c];
                tie[((size_t)b * 5 + 1 + c) * h * w + p] = 0;
            }
        }
    }
    xfree(m);
    xfree(im);
}

static double max_diff(const float *got, const double *want, const unsigned char *tie, size_t n,
                       int *ties)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (tie && tie[i]) {
            (*ties)++;
            continue;
        }
        worst = fmax(worst, fabs(got[i] - want[i]));
    }
    return worst;
}

static void test_build(void)
{
    enum { B = 2, HH = 4, WW = 6 };
    const float s = 0.18215f;
    float latent[B * 4 * HH * WW], noise4[B * 4 * HH * WW], cmask[1 * 32 * 48],
        clat[3 * 4 * 2 * 3], out[B * 5 * HH * WW];
    double want[B * 5 * HH * WW];
    unsigned char tie[B * 5 * HH * WW];
    struct err e = {0};
    int ties = 0;
    wave(latent, sizeof latent / sizeof *latent, 0.31, 0.2, 1.5, 0);
    wave(noise4, sizeof noise4 / sizeof *noise4, 0.17, 0.4, 0.7, 0.5);
    wave(cmask, sizeof cmask / sizeof *cmask, 0.05, 0.3, 0.6, 0.5);
    wave(clat, sizeof clat / sizeof *clat, 0.23, 0.9, 2.0, 0.1);

    /* nothing set, no noise mask: ones | blank, whatever the latent */
    struct sd_cond_entry en;
    memset(&en, 0, sizeof en);
    EXPECT_OK(sd_concat_build(MODEL_CONCAT_INPAINT, &en, latent, NULL, s, B, HH, WW, out, &e));
    expect_inpaint(NULL, 0, 0, 0, latent, B, HH, WW, B, HH, WW, want, tie);
    ok(max_diff(out, want, NULL, sizeof out / sizeof *out, &ties) < 1e-7,
       "inpaint without a mask: ones and the black image's latent");

    /* the latent's noise mask (prepared: [B, 4, h, w]) and the latent itself */
    float nm1[B * HH * WW];
    for (int b = 0; b < B; b++)
        memcpy(nm1 + b * HH * WW, noise4 + b * 4 * HH * WW, HH * WW * sizeof(float));
    EXPECT_OK(sd_concat_build(MODEL_CONCAT_INPAINT, &en, latent, noise4, s, B, HH, WW, out, &e));
    expect_inpaint(nm1, B, HH, WW, latent, B, HH, WW, B, HH, WW, want, tie);
    double d = max_diff(out, want, tie, sizeof out / sizeof *out, &ties);
    ok(d < 1e-6, "inpaint from the noise mask (first channel, rounded) and the latent (%.2g)", d);

    /* the entry's concat_mask (pixels, 8x: bilinear down) and concat_latent (2x3, batch 3 ->
     * 2: samples 0 and 2; bilinear up, x scale) win over the noise mask and latent */
    en.concat_mask = cmask;
    en.concat_mask_b = 1;
    en.concat_mask_h = 32;
    en.concat_mask_w = 48;
    en.concat_latent = clat;
    en.concat_b = 3;
    en.concat_h = 2;
    en.concat_w = 3;
    EXPECT_OK(sd_concat_build(MODEL_CONCAT_INPAINT, &en, latent, noise4, s, B, HH, WW, out, &e));
    float clat_s[3 * 4 * 2 * 3], pick[B * 4 * 2 * 3];
    for (size_t i = 0; i < sizeof clat / sizeof *clat; i++)
        clat_s[i] = clat[i];
    memcpy(pick, clat_s, 24 * sizeof(float));           /* sample 0 */
    memcpy(pick + 24, clat_s + 2 * 24, 24 * sizeof(float)); /* sample 2 */
    expect_inpaint(cmask, 1, 32, 48, pick, B, 2, 3, B, HH, WW, want, tie);
    for (int b = 0; b < B; b++)
        for (int p = 0; p < 4 * HH * WW; p++)
            want[(size_t)b * 5 * HH * WW + HH * WW + p] *= s;
    d = max_diff(out, want, tie, sizeof out / sizeof *out, &ties);
    ok(d < 1e-5, "inpaint from concat_mask and concat_latent_image x 0.18215 (%.2g)", d);

    /* a concat_mask of another aspect: center crop first (48 x 32 -> the middle 48 x 48?
     * no: 32 wide, 48 high to 6:4 keeps 32 x 21.33 -> round((48 - 21.33) / 2) = 13 rows) */
    float tall[32 * 48];
    wave(tall, 32 * 48, 0.07, 0.1, 0.6, 0.5);
    en.concat_mask = tall;
    en.concat_mask_h = 48;
    en.concat_mask_w = 32;
    EXPECT_OK(sd_concat_build(MODEL_CONCAT_INPAINT, &en, latent, noise4, s, B, HH, WW, out, &e));
    int y0 = (int)nearbyint((48 - 48 * ((32.0 / 48) / (6.0 / 4))) / 2), ch = 48 - 2 * y0;
    double cm[HH * WW];
    bilinear64(tall + y0 * 32, 1, ch, 32, HH, WW, cm);
    int bad = 0, n_tie = 0;
    for (int b = 0; b < B; b++)
        for (int p = 0; p < HH * WW; p++) {
            if (fabs(cm[p] - floor(cm[p]) - 0.5) < 1e-4) {
                n_tie++;
                continue;
            }
            bad += out[(size_t)b * 5 * HH * WW + p] != (float)nearbyint(cm[p]);
        }
    ok(y0 == 13 && bad == 0, "a 32x48 mask is center-cropped (%d rows off each end) then "
                             "resized (%d wrong, %d ties)", y0, bad, n_tie);

    /* instruct-pix2pix: concat_latent_image as stored (no scale), else zeros */
    float out4[B * 4 * HH * WW];
    EXPECT_OK(sd_concat_build(MODEL_CONCAT_IP2P, &en, latent, noise4, s, B, HH, WW, out4, &e));
    double *w4 = xmalloc(sizeof out4 / sizeof *out4 * sizeof *w4);
    bilinear64(pick, B * 4, 2, 3, HH, WW, w4);
    d = max_diff(out4, w4, NULL, sizeof out4 / sizeof *out4, &ties);
    ok(d < 1e-5, "ip2p: concat_latent_image unscaled, resized and batched (%.2g)", d);
    xfree(w4);
    struct sd_cond_entry none;
    memset(&none, 0, sizeof none);
    EXPECT_OK(sd_concat_build(MODEL_CONCAT_IP2P, &none, latent, noise4, s, B, HH, WW, out4, &e));
    int zeros = 1;
    for (size_t i = 0; i < sizeof out4 / sizeof *out4; i++)
        zeros &= out4[i] == 0.0f;
    ok(zeros, "ip2p without an image: zeros (not the latent, not the noise mask)");
    printf("# %d mask values at rounding ties left unchecked\n", ties);
}

/* ---- KSampler with a stand-in concat model -------------------------------------------------- */

#define SH 4
#define SW 4
#define SB 2

struct stub {
    int in_ch;
    int calls;
    /* the concat channels each side saw, at [side][sample][c][y][x] of the whole latent,
     * with `seen` counting writes (a region writes its slice) */
    float got[3][SB][5][SH][SW];
    int seen[3][SB][SH][SW];
    int region_h[3], region_w[3];
    int bad;
};

/* ctx value -> which entry made the call: +1 positive, -1 negative (a twin uses its text). */
static int stub_eps(void *impl, const float *x_in, int batch, int h, int w, const float *ts,
                    const float *ctx, int tokens, int dim, float *eps, struct err *e)
{
    struct stub *s = impl;
    (void)ts;
    (void)e;
    s->calls++;
    int cc = s->in_ch - 4;
    for (int i = 0; i < batch; i++) {
        float id = ctx[(size_t)i * tokens * dim];
        int side = id > 0 ? 0 : h == SH ? 1 : 2; /* 2: the positive area's twin */
        int smp = i % SB;
        s->region_h[side] = h;
        s->region_w[side] = w;
        int y0 = h == SH ? 0 : 1, x0 = w == SW ? 0 : 1;
        for (int c = 0; c < cc; c++)
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    s->got[side][smp][c][y0 + y][x0 + x] =
                        x_in[(((size_t)i * s->in_ch + 4 + c) * h + y) * w + x];
                    if (c == 0)
                        s->seen[side][smp][y0 + y][x0 + x]++;
                }
    }
    memset(eps, 0, (size_t)batch * 4 * h * w * sizeof *eps);
    return 0;
}

static void stub_free(void *impl)
{
    xfree(impl);
}

static const struct sd_model_ops stub_ops = {.apply_eps = stub_eps, .free = stub_free};

static struct sd_cond *cond_of(float id)
{
    float ctx[2 * 8];
    for (int i = 0; i < 16; i++)
        ctx[i] = id;
    return sd_cond_new(ctx, 1, 2, 8, NULL, 0);
}

static void test_sampler(int kind)
{
    const float s = 0.18215f;
    struct stub *st = xcalloc(1, sizeof *st);
    st->in_ch = 4 + model_concat_channels(kind);
    struct sd_model *m = sd_model_new(&stub_ops, st);
    m->concat = kind;
    struct value *model = sd_model_value(m);
    /* positive: an area (2x2 at 1,1) with concat keys; negative: nothing set */
    struct sd_cond *pos = cond_of(1.0f), *neg = cond_of(-1.0f);
    struct sd_cond_entry *pe = &pos->entries[0];
    pe->has_area = 1;
    pe->area_h = pe->area_w = 2;
    pe->area_y = pe->area_x = 1;
    pe->concat_mask_b = 1;
    pe->concat_mask_h = pe->concat_mask_w = 8 * SH;
    pe->concat_mask = xmalloc(8 * SH * 8 * SW * sizeof(float));
    wave(pe->concat_mask, 8 * SH * 8 * SW, 0.09, 0.5, 0.6, 0.5);
    pe->concat_b = 1;
    pe->concat_h = SH;
    pe->concat_w = SW;
    pe->concat_latent = xmalloc(4 * SH * SW * sizeof(float));
    wave(pe->concat_latent, 4 * SH * SW, 0.41, 0.2, 1.0, 0);
    struct sd_latent *lat = sd_latent_new(SB, 4, SH, SW);
    wave(lat->samples, SB * 4 * SH * SW, 0.13, 0.6, 1.2, 0);
    lat->mb = 1;
    lat->mh = 8 * SH;
    lat->mw = 8 * SW;
    lat->noise_mask = xmalloc(8 * SH * 8 * SW * sizeof(float));
    wave(lat->noise_mask, 8 * SH * 8 * SW, 0.03, 0.1, 0.6, 0.5);
    double pmask[SH * SW], nmask[SH * SW];
    bilinear64(pe->concat_mask, 1, 8 * SH, 8 * SW, SH, SW, pmask);
    bilinear64(lat->noise_mask, 1, 8 * SH, 8 * SW, SH, SW, nmask);
    float pl[4 * SH * SW];
    memcpy(pl, pe->concat_latent, sizeof pl);

    const char *names[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                           "positive", "negative", "latent_image", "denoise"};
    struct value *v[] = {model, value_new_u64(3), value_new_int(1), value_new_float(2.0),
                         value_new_string("euler"), value_new_string("normal"),
                         sd_cond_value(pos), sd_cond_value(neg), sd_latent_value(lat),
                         value_new_float(1.0)};
    char msg[256];
    struct value *out[4], *refs[10];
    for (int i = 0; i < 10; i++)
        refs[i] = value_ref(v[i]); /* run_node takes these; v[] stays ours */
    int rc = run_node(&sd_ksampler, names, refs, 10, out, msg, sizeof msg);
    ok(rc == 0, "KSampler with a %s stand-in: %s", kind == MODEL_CONCAT_INPAINT ? "inpaint" : "ip2p",
       rc ? msg : "ok");
    for (int i = 0; i < 4; i++)
        value_unref(out[i]);
    /* Expected per side: 0 = the positive's area, 1 = the negative (whole latent), 2 = the
     * negative's twin of the area (the negative's c_concat: model_conds of the entry whose
     * text it takes). */
    int wrong = 0, checked = 0;
    const struct sd_latent *L = sd_latent_of(v[8]);
    for (int side = 0; side < 3; side++)
        for (int b = 0; b < SB; b++)
            for (int y = 0; y < SH; y++)
                for (int x = 0; x < SW; x++) {
                    int in_area = y >= 1 && y < 3 && x >= 1 && x < 3;
                    int want_seen = side == 1 || in_area;
                    if (st->seen[side][b][y][x] != want_seen) {
                        wrong++;
                        continue;
                    }
                    if (!want_seen)
                        continue;
                    int p = y * SW + x, pos_side = side == 0;
                    for (int c = 0; c < st->in_ch - 4; c++) {
                        double want;
                        if (kind == MODEL_CONCAT_IP2P)
                            want = pos_side ? pl[c * SH * SW + p] : 0.0;
                        else if (c == 0) {
                            double mv = pos_side ? pmask[p] : nmask[p];
                            if (fabs(mv - floor(mv) - 0.5) < 1e-4)
                                continue;
                            want = nearbyint(mv);
                        } else {
                            want = pos_side ? (double)pl[(c - 1) * SH * SW + p] * s
                                            : (double)L->samples[((size_t)b * 4 + c - 1) * SH * SW + p] * s;
                        }
                        checked++;
                        if (fabs(st->got[side][b][c][y][x] - want) > 1e-5)
                            wrong++;
                    }
                }
    ok(wrong == 0 && checked > 0 && st->region_h[0] == 2 && st->region_h[1] == SH &&
           st->region_h[2] == 2,
       "%s: each call's x_in carries the entry's c_concat (area slices, the twin's from the "
       "negative, the negative's from the noise mask and latent): %d of %d wrong",
       kind == MODEL_CONCAT_INPAINT ? "inpaint" : "ip2p", wrong, checked);
    for (int i = 0; i < 10; i++)
        value_unref(v[i]);
}

/* ---- the nodes on a tiny checkpoint ------------------------------------------------------ */

static struct value *image_of(int b, int h, int w)
{
    struct value *img = value_new_image(b, h, w, 3);
    for (size_t i = 0; i < img->numel; i++)
        img->data[i] = (float)(0.5 + 0.45 * sin(0.037 * (double)i));
    return img;
}

static struct value *vae_encode(struct value *vae, struct value *img)
{
    const char *n[] = {"pixels", "vae"};
    struct value *v[] = {img, value_ref(vae)}, *o[4];
    if (run_node(&sd_vae_encode, n, v, 2, o, NULL, 0) < 0)
        PANIC("VAEEncode");
    return o[0];
}

static int floats_equal(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* KSampler (2 steps) on model; the output latent (NULL after a reported failure). */
static struct value *ksample(struct value *model, struct value *pos, struct value *neg,
                             struct value *lat, char *msg, size_t msg_size)
{
    const char *names[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                           "positive", "negative", "latent_image", "denoise"};
    struct value *v[] = {value_ref(model), value_new_u64(9), value_new_int(2),
                         value_new_float(5.0), value_new_string("euler"),
                         value_new_string("normal"), value_ref(pos), value_ref(neg),
                         value_ref(lat), value_new_float(1.0)};
    struct value *out[4];
    if (run_node(&sd_ksampler, names, v, 10, out, msg, msg_size) < 0)
        return NULL;
    return out[0];
}

static int latent_finite(const struct value *v)
{
    const struct sd_latent *l = sd_latent_of(v);
    if (!l)
        return 0;
    for (int64_t i = 0; i < l->b * l->c * l->h * l->w; i++)
        if (!isfinite(l->samples[i]))
            return 0;
    return 1;
}

static void load(const char *name, struct value **model, struct value **clip, struct value **vae)
{
    const char *cn[] = {"ckpt_name"};
    struct value *cv[] = {value_new_string(name)}, *o[4];
    char msg[256];
    int rc = run_node(&sd_checkpoint_loader_simple, cn, cv, 1, o, msg, sizeof msg);
    if (rc < 0)
        PANIC("load %s: %s", name, msg);
    *model = o[0];
    *clip = o[1];
    *vae = o[2];
}

static struct value *text(struct value *clip, const char *t)
{
    const char *n[] = {"text", "clip"};
    struct value *v[] = {value_new_string(t), value_ref(clip)}, *o[4];
    if (run_node(&sd_clip_text_encode, n, v, 2, o, NULL, 0) < 0)
        PANIC("CLIPTextEncode");
    return o[0];
}

static void test_nodes(void)
{
    struct model_config cfg;
    sd15_config_tiny(&cfg);
    cfg.unet.in_ch = 9;
    gen("inpaint.safetensors", &cfg);
    cfg.unet.in_ch = 8;
    gen("ip2p.safetensors", &cfg);
    sd2_config_tiny(&cfg);
    cfg.unet.in_ch = 9;
    gen("sd2_inpaint.safetensors", &cfg);
    struct value *model, *clip, *vae;
    load("inpaint.safetensors", &model, &clip, &vae);
    ok(sd_model_of(model)->concat == MODEL_CONCAT_INPAINT, "the 9-channel MODEL is an inpaint one");
    struct value *pos = text(clip, "a red door"), *neg = text(clip, "blurry");
    /* an entry key set before must travel along */
    ((struct sd_cond *)sd_cond_of(pos))->entries[0].strength = 0.75f;

    /* pixels 20x20 (cropped to 16x16 at offset 2), mask 10x10 */
    enum { PH = 20, PW = 20, MH = 10, MW = 10, CH = 16 };
    struct value *img = image_of(1, PH, PW);
    struct value *mask = value_new_mask(1, MH, MW);
    for (int y = 0; y < MH; y++)
        for (int x = 0; x < MW; x++)
            mask->data[y * MW + x] = (float)(x >= 3 && x < 8 && y >= 2 && y < 7 ? 0.9 : 0.1 * (x % 3));
    const char *n[] = {"positive", "negative", "vae", "pixels", "mask", "noise_mask"};
    struct value *vals[] = {value_ref(pos), value_ref(neg), value_ref(vae), value_ref(img),
                            value_ref(mask), value_new_bool(1)};
    struct value *o[4];
    char msg[256];
    int rc = run_node(&sd_inpaint_model_conditioning, n, vals, 6, o, msg, sizeof msg);
    ok(rc == 0 && sd_cond_of(o[0]) && sd_cond_of(o[1]) && sd_latent_of(o[2]),
       "InpaintModelConditioning: positive, negative, latent (%s)", rc ? msg : "ok");
    if (rc < 0)
        return;
    /* the mask: bilinear 10 -> 20, cropped [2:18] (float64 here) */
    double full[PH * PW], want[CH * CH];
    bilinear64(mask->data, 1, MH, MW, PH, PW, full);
    for (int y = 0; y < CH; y++)
        for (int x = 0; x < CH; x++)
            want[y * CH + x] = full[(y + 2) * PW + x + 2];
    const struct sd_cond_entry *pe = &sd_cond_of(o[0])->entries[0],
                               *ne = &sd_cond_of(o[1])->entries[0];
    const struct sd_latent *lat = sd_latent_of(o[2]);
    double dm = 0, dn = 0;
    for (int i = 0; i < CH * CH && pe->concat_mask && lat->noise_mask; i++) {
        dm = fmax(dm, fabs(pe->concat_mask[i] - want[i]));
        dn = fmax(dn, fabs(lat->noise_mask[i] - want[i]));
    }
    ok(pe->concat_mask && pe->concat_mask_b == 1 && pe->concat_mask_h == CH &&
           pe->concat_mask_w == CH && dm < 1e-6 && ne->concat_mask &&
           floats_equal(ne->concat_mask, pe->concat_mask, CH * CH),
       "concat_mask: the mask resized to 20x20 and cropped to 16x16, not rounded (%.2g)", dm);
    ok(lat->noise_mask && lat->mb == 1 && lat->mh == CH && lat->mw == CH && dn < 1e-6,
       "the latent's noise_mask is that mask (%.2g)", dn);
    /* the grey image built here: cropped, (p - .5) * (1 - round(mask)) + .5 */
    struct value *grey = value_new_image(1, CH, CH, 3);
    for (int y = 0; y < CH; y++)
        for (int x = 0; x < CH; x++)
            for (int k = 0; k < 3; k++) {
                float p = img->data[((y + 2) * PW + x + 2) * 3 + k];
                grey->data[(y * CH + x) * 3 + k] =
                    (p - 0.5f) * (1.0f - (float)nearbyint(want[y * CH + x])) + 0.5f;
            }
    struct value *lg = vae_encode(vae, grey), *lo = vae_encode(vae, value_ref(img));
    const struct sd_latent *g = sd_latent_of(lg), *orig = sd_latent_of(lo);
    ok(pe->concat_latent && pe->concat_b == 1 && pe->concat_h == 2 && pe->concat_w == 2 &&
           floats_equal(pe->concat_latent, g->samples, 4 * 2 * 2) && ne->concat_latent &&
           floats_equal(ne->concat_latent, g->samples, 4 * 2 * 2),
       "concat_latent_image is VAEEncode of the greyed, cropped image (both sides)");
    ok(lat->b == 1 && lat->h == 2 && floats_equal(lat->samples, orig->samples, 4 * 2 * 2) &&
           !floats_equal(orig->samples, g->samples, 4 * 2 * 2),
       "the LATENT is VAEEncode of the original image");
    ok(pe->strength == 0.75f && ne->strength == 1.0f && pe->tokens == 77,
       "other keys of the entries are kept");

    /* KSampler on the 9-channel UNet with it; the concat reaches the UNet */
    char kmsg[256];
    struct value *s1 = ksample(model, o[0], o[1], o[2], kmsg, sizeof kmsg);
    struct value *s0 = ksample(model, pos, neg, o[2], kmsg, sizeof kmsg);
    ok(s1 && s0 && latent_finite(s1) && latent_finite(s0) &&
           !floats_equal(sd_latent_of(s1)->samples, sd_latent_of(s0)->samples, 16),
       "KSampler runs the 9-channel UNet; with the concat keys the result differs (%s)",
       s1 && s0 ? "ok" : kmsg);
    value_unref(s1);
    value_unref(s0);

    /* noise_mask off: no mask on the latent, the concat keys the same */
    struct value *vals2[] = {value_ref(pos), value_ref(neg), value_ref(vae), value_ref(img),
                             value_ref(mask), value_new_bool(0)};
    struct value *o2[4];
    rc = run_node(&sd_inpaint_model_conditioning, n, vals2, 6, o2, msg, sizeof msg);
    ok(rc == 0 && !sd_latent_of(o2[2])->noise_mask &&
           sd_cond_of(o2[0])->entries[0].concat_mask,
       "noise_mask false: the latent has no noise mask, the conditioning still has concat_mask");
    for (int i = 0; i < 4; i++)
        value_unref(o2[i]);
    /* bad input: a MASK that is not one, an IMAGE that is not one */
    struct value *bad1[] = {value_ref(pos), value_ref(neg), value_ref(vae), value_ref(img),
                            value_new_int(3), value_new_bool(1)};
    rc = run_node(&sd_inpaint_model_conditioning, n, bad1, 6, NULL, msg, sizeof msg);
    ok(rc < 0 && strstr(msg, "MASK"), "an INT as the mask: %s", msg);
    struct value *bad2[] = {value_ref(pos), value_ref(neg), value_ref(model), value_ref(img),
                            value_ref(mask), value_new_bool(1)};
    rc = run_node(&sd_inpaint_model_conditioning, n, bad2, 6, NULL, msg, sizeof msg);
    ok(rc < 0 && strstr(msg, "VAE"), "a MODEL as the vae: %s", msg);
    for (int i = 0; i < 4; i++)
        value_unref(o[i]);
    value_unref(lg);
    value_unref(lo);

    /* InstructPixToPixConditioning on the 8-channel model */
    struct value *m8, *c8, *v8;
    load("ip2p.safetensors", &m8, &c8, &v8);
    ok(sd_model_of(m8)->concat == MODEL_CONCAT_IP2P, "the 8-channel MODEL is an ip2p one");
    const char *n8[] = {"positive", "negative", "vae", "pixels"};
    struct value *vals8[] = {value_ref(pos), value_ref(neg), value_ref(v8), value_ref(img)};
    rc = run_node(&sd_instruct_pix2pix_conditioning, n8, vals8, 4, o, msg, sizeof msg);
    ok(rc == 0, "InstructPixToPixConditioning (%s)", rc ? msg : "ok");
    if (rc == 0) {
        struct value *l8 = vae_encode(v8, value_ref(img));
        const struct sd_latent *z = sd_latent_of(o[2]), *e8 = sd_latent_of(l8);
        int zero = z && z->b == 1 && z->c == 4 && z->h == 2 && z->w == 2 && !z->noise_mask;
        for (int i = 0; zero && i < 16; i++)
            zero = z->samples[i] == 0.0f;
        pe = &sd_cond_of(o[0])->entries[0];
        ne = &sd_cond_of(o[1])->entries[0];
        ok(zero && pe->concat_latent && ne->concat_latent && !pe->concat_mask &&
               floats_equal(pe->concat_latent, e8->samples, 16) &&
               floats_equal(ne->concat_latent, e8->samples, 16) && pe->strength == 0.75f,
           "ip2p: a zero LATENT of the image's latent shape; concat_latent_image = VAEEncode");
        struct value *s8 = ksample(m8, o[0], o[1], o[2], kmsg, sizeof kmsg);
        struct value *s8b = ksample(m8, pos, neg, o[2], kmsg, sizeof kmsg);
        ok(s8 && s8b && latent_finite(s8) &&
               !floats_equal(sd_latent_of(s8)->samples, sd_latent_of(s8b)->samples, 16),
           "KSampler runs the 8-channel UNet; the image latent changes the result (%s)",
           s8 && s8b ? "ok" : kmsg);
        value_unref(s8);
        value_unref(s8b);
        value_unref(l8);
        for (int i = 0; i < 4; i++)
            value_unref(o[i]);
    }
    /* the ip2p keys on the inpainting model: its concat takes the image latent, masks none */
    struct value *vals8b[] = {value_ref(pos), value_ref(neg), value_ref(vae), value_ref(img)};
    rc = run_node(&sd_instruct_pix2pix_conditioning, n8, vals8b, 4, o, msg, sizeof msg);
    struct value *sx = rc == 0 ? ksample(model, o[0], o[1], o[2], kmsg, sizeof kmsg) : NULL;
    ok(sx && latent_finite(sx), "ip2p conditioning on the inpainting model samples (%s)",
       sx ? "ok" : kmsg);
    value_unref(sx);
    for (int i = 0; rc == 0 && i < 4; i++)
        value_unref(o[i]);
    value_unref(m8);
    value_unref(c8);
    value_unref(v8);

    /* A ControlNet (4 input channels) on the inpainting model: it is given the latent's
     * channels, not the concat (ComfyUI's x_noisy) */
    sd15_config_tiny(&cfg);
    gen_in("controlnet", "cn.safetensors", &cfg, CKPT_GEN_CONTROLNET);
    {
        const char *ln[] = {"control_net_name"};
        struct value *lv[] = {value_new_string("cn.safetensors")}, *cn[4];
        rc = run_node(&sd_controlnet_loader, ln, lv, 1, cn, msg, sizeof msg);
        ok(rc == 0, "ControlNetLoader (%s)", rc ? msg : "ok");
        struct value *im[4];
        rc = run_node(&sd_inpaint_model_conditioning, n,
                      (struct value *[]){value_ref(pos), value_ref(neg), value_ref(vae),
                                         value_ref(img), value_ref(mask), value_new_bool(1)},
                      6, im, msg, sizeof msg);
        const char *an[] = {"positive", "negative", "control_net", "image", "strength",
                            "start_percent", "end_percent"};
        struct value *av[] = {value_ref(im[0]), value_ref(im[1]), value_ref(cn[0]),
                              value_ref(img), value_new_float(1.0), value_new_float(0.0),
                              value_new_float(1.0)};
        struct value *ao[4];
        rc = run_node(&sd_controlnet_apply_advanced, an, av, 7, ao, msg, sizeof msg);
        struct value *sc = rc == 0 ? ksample(model, ao[0], ao[1], im[2], kmsg, sizeof kmsg) : NULL;
        struct value *sn = ksample(model, im[0], im[1], im[2], kmsg, sizeof kmsg);
        ok(sc && sn && latent_finite(sc) &&
               !floats_equal(sd_latent_of(sc)->samples, sd_latent_of(sn)->samples, 16),
           "a ControlNet on the 9-channel UNet runs and changes the result (%s)",
           sc ? "ok" : rc ? msg : kmsg);
        value_unref(sc);
        value_unref(sn);
        for (int i = 0; i < 4; i++) {
            value_unref(cn[i]);
            value_unref(im[i]);
            value_unref(rc == 0 ? ao[i] : NULL);
        }
    }

    /* SDXL inpainting (9 channels, the ADM input too) */
    sdxl_config_tiny(&cfg);
    cfg.unet.in_ch = 9;
    gen("sdxl_inpaint.safetensors", &cfg);
    {
        struct value *mx, *cx, *vx;
        load("sdxl_inpaint.safetensors", &mx, &cx, &vx);
        struct value *px = text(cx, "a red door"), *nx = text(cx, "");
        struct value *vv[] = {value_ref(px), value_ref(nx), value_ref(vx), value_ref(img),
                              value_ref(mask), value_new_bool(1)};
        rc = run_node(&sd_inpaint_model_conditioning, n, vv, 6, o, msg, sizeof msg);
        struct value *sx2 = rc == 0 ? ksample(mx, o[0], o[1], o[2], kmsg, sizeof kmsg) : NULL;
        ok(sd_model_of(mx)->concat == MODEL_CONCAT_INPAINT && sx2 && latent_finite(sx2),
           "SDXL inpainting: InpaintModelConditioning + KSampler (%s)", sx2 ? "ok" : kmsg);
        value_unref(sx2);
        for (int i = 0; rc == 0 && i < 4; i++)
            value_unref(o[i]);
        value_unref(px);
        value_unref(nx);
        value_unref(mx);
        value_unref(cx);
        value_unref(vx);
    }

    /* SDXL instruct-pix2pix (8 channels; a diffusers ip2p: the image latent unscaled) */
    sdxl_config_tiny(&cfg);
    cfg.unet.in_ch = 8;
    gen("sdxl_ip2p.safetensors", &cfg);
    {
        struct value *mx, *cx, *vx;
        load("sdxl_ip2p.safetensors", &mx, &cx, &vx);
        struct value *px = text(cx, "make it red"), *nx = text(cx, "");
        struct value *vv[] = {value_ref(px), value_ref(nx), value_ref(vx), value_ref(img)};
        rc = run_node(&sd_instruct_pix2pix_conditioning, n8, vv, 4, o, msg, sizeof msg);
        struct value *sx2 = rc == 0 ? ksample(mx, o[0], o[1], o[2], kmsg, sizeof kmsg) : NULL;
        ok(sd_model_of(mx)->concat == MODEL_CONCAT_IP2P && sx2 && latent_finite(sx2),
           "SDXL instruct-pix2pix: InstructPixToPixConditioning + KSampler (%s)",
           sx2 ? "ok" : rc ? msg : kmsg);
        value_unref(sx2);
        for (int i = 0; rc == 0 && i < 4; i++)
            value_unref(o[i]);
        value_unref(px);
        value_unref(nx);
        value_unref(mx);
        value_unref(cx);
        value_unref(vx);
    }

    /* SD2 512-inpainting: loads, samples with its own CLIP's conditioning */
    struct value *m2, *c2, *v2;
    load("sd2_inpaint.safetensors", &m2, &c2, &v2);
    struct value *p2 = text(c2, "a red door"), *n2 = text(c2, "");
    struct value *vals2b[] = {value_ref(p2), value_ref(n2), value_ref(v2), value_ref(img),
                              value_ref(mask), value_new_bool(1)};
    rc = run_node(&sd_inpaint_model_conditioning, n, vals2b, 6, o, msg, sizeof msg);
    struct value *s2 = rc == 0 ? ksample(m2, o[0], o[1], o[2], kmsg, sizeof kmsg) : NULL;
    ok(sd_model_of(m2)->concat == MODEL_CONCAT_INPAINT && s2 && latent_finite(s2),
       "SD2 512-inpainting: InpaintModelConditioning + KSampler (%s)", s2 ? "ok" : kmsg);
    value_unref(s2);
    for (int i = 0; rc == 0 && i < 4; i++)
        value_unref(o[i]);
    value_unref(p2);
    value_unref(n2);
    value_unref(m2);
    value_unref(c2);
    value_unref(v2);
    value_unref(img);
    value_unref(mask);
    value_unref(pos);
    value_unref(neg);
    value_unref(model);
    value_unref(clip);
    value_unref(vae);
}

static void rm_dir(void)
{
    const char *names[] = {"checkpoints/inpaint.safetensors", "checkpoints/ip2p.safetensors",
                           "checkpoints/sd2_inpaint.safetensors",
                           "checkpoints/sdxl_inpaint.safetensors",
                           "checkpoints/sdxl_ip2p.safetensors", "controlnet/cn.safetensors"};
    char p[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(ckdir);
    snprintf(p, sizeof p, "%s/controlnet", dir);
    rmdir(p);
    rmdir(dir);
}

int main(void)
{
    long live0 = alloc_live_count();
    snprintf(dir, sizeof dir, "/tmp/test_sd_concat.XXXXXX");
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    snprintf(ckdir, sizeof ckdir, "%s/checkpoints", dir);
    mkdir(ckdir, 0755);
    tensor_threads_set(2);
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    struct err e = {0};
    EXPECT_OK(mm_new(&mc, &mm, &e));
    env.models_dir = dir;
    env.mm = mm;

    test_detect();
    test_unet(mm, 9);
    test_unet(mm, 8);
    test_resize_batch();
    test_build();
    test_sampler(MODEL_CONCAT_INPAINT);
    test_sampler(MODEL_CONCAT_IP2P);
    test_nodes();

    mm_free(mm);
    rm_dir();
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
