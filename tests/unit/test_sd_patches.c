/*
 * test_sd_patches — the attention model patches (sd_model_patches.h) on a tiny random
 * checkpoint (tools/ckpt_gen) on the CPU, against float64 computations written here and
 * the float64 UNet of ref_unet64.c:
 *   - HyperTile's draws: torch.randint on PyTorch's CPU generator is one 32-bit output
 *     modulo the range (values printed by torch 1.13), random_divisor's candidates;
 *   - SelfAttentionGuidance's blur map (sampling_sag.h) against a double transcription of
 *     create_blur_map / gaussian_blur_2d, and its failure on an unfactorable map;
 *   - one KSampler step (euler, denoise 0.5, cfg 6) with HyperTile, SelfAttentionGuidance,
 *     PerpNeg, and SAG over a LoRA, each against the same step computed in float64 from
 *     the weights: eps of the cond and uncond passes (HyperTile's tiled self-attention
 *     with ComfyUI's draws, SAG's recorded middle-block map, the LoRA delta merged into
 *     the weight), CFG, the blur and the second uncond pass, perp_neg;
 *   - stacking: LoRA then SAG equals SAG then LoRA; bad input (SAG without a negative
 *     side, PerpNeg with a DualCFG-style guider is refused by name).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "harness.h"
#include "memmgr.h"
#include "node_registry.h"
#include "node_run.h"
#include "ref_unet64.h"
#include "safetensors.h"
#include "sampling_noise.h"
#include "sampling_rng.h"
#include "sampling_sag.h"
#include "sampling_sched.h"
#include "sd_backend.h"
#include "sd_extra_nodes.h"
#include "sd_nodes.h"
#include "sd_types.h"
#include "unet_hypertile.h"

static struct node_env env;

/* Run `cls` with named inputs (references taken over); outputs into out[4] (or dropped). */
static int run(const struct node_class *cls, const char *const *names, struct value **vals,
               int n, struct value **out, char *msg, size_t msg_size)
{
    struct value *in[16] = {0}, *outs[4] = {0};
    for (int i = 0; i < n; i++)
        in[node_class_input_index(cls, names[i])] = vals[i];
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

/* ---- HyperTile's draws ---------------------------------------------------------------- */

/* random_divisor as nodes_hypertile.py writes it, with a Python-style list. */
static int64_t py_random_divisor(int64_t value, int64_t min_value, int max_options,
                                 struct sampling_rng *rng)
{
    min_value = min_value < value ? min_value : value;
    int64_t divisors[4096], ns[4096];
    int nd = 0, n = 0;
    for (int64_t i = min_value; i <= value; i++)
        if (value % i == 0)
            divisors[nd++] = i;
    for (int i = 0; i < nd && i < max_options; i++)
        ns[n++] = value / divisors[i];
    int64_t idx = 0;
    if (n - 1 > 0) /* randint(low=0, high=len(ns) - 1): V % range + low */
        idx = (int64_t)(sampling_rng_u32(rng) % (uint32_t)(n - 1));
    return ns[idx];
}

static void test_draws(void)
{
    /* torch.manual_seed(5); torch.randn(1,4,4,4); [torch.randint(0,n,(1,)) for n in 3..8] */
    static const int want5[6] = {2, 1, 4, 0, 2, 5};
    /* torch.manual_seed(0); randint(0, n) for n in 2,3,5,7,2,3 */
    static const int want0[6] = {0, 0, 3, 2, 1, 0}, n0[6] = {2, 3, 5, 7, 2, 3};
    struct sampling_rng r;
    float tmp[64];
    int same = 1;
    sampling_rng_seed(&r, 5);
    sampling_rng_randn(&r, tmp, 64, SAMPLING_RANDN_V2);
    for (int i = 0; i < 6; i++)
        same &= (int)(sampling_rng_u32(&r) % (uint32_t)(i + 3)) == want5[i];
    sampling_rng_seed(&r, 0);
    for (int i = 0; i < 6; i++)
        same &= (int)(sampling_rng_u32(&r) % (uint32_t)n0[i]) == want0[i];
    ok(same, "torch.randint(0, n) after manual_seed (and a randn) is one 32-bit output mod n");

    struct sampling_rng a, b;
    sampling_rng_seed(&a, 1234);
    sampling_rng_seed(&b, 1234);
    int agree = 1;
    static const int64_t vals[] = {16, 64, 12, 7, 96, 1, 30};
    for (int k = 0; k < 7; k++)
        for (int mo = 1; mo <= 5; mo++)
            for (int64_t mv = 1; mv <= 40; mv += 3)
                agree &= unet_hypertile_divisor(vals[k], mv, mo, &a) ==
                         py_random_divisor(vals[k], mv, mo, &b);
    ok(agree && sampling_rng_u32(&a) == sampling_rng_u32(&b),
       "random_divisor: same picks and the same draws as the Python transcription");
    ok(unet_hypertile_divisor(16, 4, 2, NULL) == 4 && unet_hypertile_divisor(16, 32, 3, NULL) == 1,
       "random_divisor(16, 4, 2) = 4 (the last candidate is never drawn), min above value: 1");
}

/* ---- SAG's blur map -------------------------------------------------------------------- */

/* create_blur_map in double, from the Python (mask grid search, nearest upsample,
 * 9-tap Gaussian with reflect padding). */
static int ref_blur_map(const float *x0, int b, int c, int h, int w, const double *colsum,
                        int tokens, double sigma, double *out)
{
    int x = (int)nearbyint(sqrt((double)h / w * tokens)), rows = 0;
    for (int i = 0; i < (int)floor(sqrt((double)tokens) / 2) && !rows; i++) {
        if (tokens % (x + i) == 0)
            rows = x + i;
        else if (tokens % (x - i > 1 ? x - i : 1) == 0)
            rows = x - i > 1 ? x - i : 1;
    }
    if (!rows)
        return -1;
    int cols = tokens / rows;
    double k[9], sum = 0;
    for (int i = 0; i < 9; i++)
        sum += k[i] = exp(-0.5 * ((i - 4) / sigma) * ((i - 4) / sigma));
    for (int s = 0; s < b; s++)
        for (int ch = 0; ch < c; ch++)
            for (int y = 0; y < h; y++)
                for (int xx = 0; xx < w; xx++) {
                    const float *p = x0 + ((size_t)s * c + ch) * h * w;
                    double acc = 0;
                    for (int i = 0; i < 9; i++)
                        for (int j = 0; j < 9; j++) {
                            int yy = y + i - 4, xw = xx + j - 4;
                            yy = yy < 0 ? -yy : yy >= h ? 2 * h - 2 - yy : yy;
                            xw = xw < 0 ? -xw : xw >= w ? 2 * w - 2 - xw : xw;
                            acc += k[i] / sum * k[j] / sum * p[yy * w + xw];
                        }
                    int my = y * rows / h, mx = xx * cols / w; /* nearest, integer ratios */
                    double m = colsum[(size_t)s * tokens + my * cols + mx] > 1.0 ? 1.0 : 0.0;
                    out[(((size_t)s * c + ch) * h + y) * w + xx] =
                        acc * m + p[y * w + xx] * (1 - m);
                }
    return 0;
}

static void test_blur(void)
{
    enum { B = 2, C = 4, H = 12, W = 10, T = 30 };
    float x0[B * C * H * W], out[B * C * H * W];
    double cs[B * T], ref[B * C * H * W];
    for (int i = 0; i < B * C * H * W; i++)
        x0[i] = (float)sin(0.37 * i + 0.2 * (i % 7));
    for (int i = 0; i < B * T; i++)
        cs[i] = 1.0 + 0.5 * sin(1.3 * i); /* about half above the threshold */
    struct err e = {0};
    EXPECT_OK(sampling_sag_blur_map(x0, B, C, H, W, cs, T, 1.7, 1.0, out, &e));
    ok(ref_blur_map(x0, B, C, H, W, cs, T, 1.7, ref) == 0, "reference finds the 6x5 grid");
    double worst = 0;
    int blurred = 0;
    for (int i = 0; i < B * C * H * W; i++) {
        worst = fmax(worst, fabs(out[i] - ref[i]));
        blurred += out[i] != x0[i];
    }
    ok(worst < 2e-6 && blurred > 100 && blurred < B * C * H * W,
       "blur map equals create_blur_map in double (max |diff| %.2e, %d of %d values blurred)",
       worst, blurred, B * C * H * W);
    ok(sampling_sag_blur_map(x0, 1, C, H, W, cs, 3, 1.7, 1.0, out, &e) == ERR_INVALID &&
           strstr(e.msg, "no grid"),
       "3 tokens have no grid (ComfyUI fails there too): %s", e.msg);
    ok(!sampling_sag_applies(4, 64) && sampling_sag_applies(5, 5),
       "SAG skips latents with a side of 4 or less");
}

/* ---- one KSampler step against float64 ----------------------------------------------- */

#define LH 16
#define LW 16
#define PER (4 * LH * LW)

static struct value *encode(struct value *clip, const char *text)
{
    const char *names[] = {"text", "clip"};
    struct value *v[] = {value_new_string(text), value_ref(clip)}, *out[4];
    return run(&sd_clip_text_encode, names, v, 2, out, NULL, 0) < 0 ? NULL : out[0];
}

static const double STEP_CFG = 6.0, STEP_DENOISE = 0.5;
static const uint64_t STEP_SEED = 11;

static struct value *ksample(struct value *model, struct value *pos, struct value *neg,
                             struct value *latent, char *msg)
{
    const char *names[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                           "positive", "negative", "latent_image", "denoise"};
    struct value *v[] = {value_ref(model), value_new_u64(STEP_SEED), value_new_int(1),
                         value_new_float(STEP_CFG), value_new_string("euler"),
                         value_new_string("normal"), value_ref(pos), value_ref(neg),
                         value_ref(latent), value_new_float(STEP_DENOISE)};
    struct value *out[4];
    return run(&sd_ksampler, names, v, 10, out, msg, 256) < 0 ? NULL : out[0];
}

/* A patch node on `model` (the other inputs after it); the new MODEL or NULL. */
static struct value *patch(const struct node_class *cls, struct value *model, const char **names,
                           struct value **vals, int n, char *msg)
{
    const char *nm[8] = {"model"};
    struct value *v[8] = {value_ref(model)}, *out[4];
    for (int i = 0; i < n; i++) {
        nm[i + 1] = names[i];
        v[i + 1] = vals[i];
    }
    return run(cls, nm, v, n + 1, out, msg, 256) < 0 ? NULL : out[0];
}

/* The step's inputs as the pipeline forms them: x = noise·σ + latent·scale (float). */
struct step {
    float sigma, t;
    double x[PER];
    double ctx[3][77 * 64]; /* positive, negative, empty */
    double sf;
    const struct unet_arch *arch;
};

static void ref_ctx_set(struct step *s, int which)
{
    ref_ctx = s->ctx[which];
    ref_tokens = 77;
    ref_ctx_dim = 64;
}

/* x0 = x − eps(x/sqrt(σ²+1), t, ctx)·σ in double at input x. */
static void ref_x0(struct step *s, const double *x, int which, double *x0)
{
    struct act in = ref_act_new(4, LH, LW);
    for (int i = 0; i < PER; i++)
        in.v[i] = x[i] / sqrt((double)s->sigma * s->sigma + 1.0);
    ref_ctx_set(s, which);
    struct act eps = ref_unet(s->arch, &in, s->t, NULL);
    for (int i = 0; i < PER; i++)
        x0[i] = x[i] - eps.v[i] * s->sigma;
    ref_act_free(&eps);
    ref_act_free(&in);
}

/* HyperTile's choices for the reference, drawn in the UNet's order from the generator
 * ComfyUI leaves after prepare_noise (one batched cond+uncond call: one set of draws). */
static struct sampling_rng ht_rng;
static int ht_tile = 32, ht_swap = 3, ht_depth = 1;
static struct { int nh, nw; } ht_pick[32];
static int ht_n, ht_i;

static int ref_tiles(const char *block, int depth, int tokens, int *nh, int *nw, int *rows,
                     int *cols)
{
    (void)block;
    (void)depth;
    int lvl = -1;
    for (int i = 0; i <= ht_depth && lvl < 0; i++)
        if (tokens == (LH >> i) * (LW >> i))
            lvl = i;
    if (lvl < 0)
        return 0;
    *rows = *cols = (int)nearbyint(sqrt((double)tokens)); /* square latent */
    if (ht_i == ht_n) { /* first pass: draw; later passes replay */
        int64_t tile = (ht_tile > 32 ? ht_tile : 32) / 8;
        ht_pick[ht_n].nh = (int)py_random_divisor(*rows, tile, ht_swap, &ht_rng);
        ht_pick[ht_n].nw = (int)py_random_divisor(*cols, tile, ht_swap, &ht_rng);
        ht_n++;
    }
    *nh = ht_pick[ht_i].nh;
    *nw = ht_pick[ht_i].nw;
    ht_i++;
    return 1;
}

/* The LoRA's delta on input_blocks.1.1's attn1 to_q (ref_w_hook). */
static float lora_up[32 * 4], lora_down[4 * 32];
static double *lora_hook(const char *name)
{
    if (strcmp(name, "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight"))
        return NULL;
    const struct st_tensor *t = st_find(ref_file, name);
    const float *f = st_tensor_data(ref_file, t);
    double *w = xmalloc(32 * 32 * sizeof *w);
    for (int o = 0; o < 32; o++)
        for (int i = 0; i < 32; i++) {
            double d = 0;
            for (int r = 0; r < 4; r++)
                d += (double)lora_up[o * 4 + r] * lora_down[r * 32 + i];
            w[o * 32 + i] = f[o * 32 + i] + d; /* strength 1, alpha = rank */
        }
    return w;
}

static void write_lora(const char *path)
{
    for (int i = 0; i < 128; i++) {
        lora_up[i] = (float)(0.3 * sin(0.9 * i + 0.3));
        lora_down[i] = (float)(0.3 * cos(0.7 * i + 0.1));
    }
    struct st_writer *w = st_writer_new();
    struct err e = {0};
    const char *pre = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
    char up[200], down[200];
    snprintf(up, sizeof up, "%s.lora_up.weight", pre);
    snprintf(down, sizeof down, "%s.lora_down.weight", pre);
    st_writer_add(w, up, ST_DTYPE_F32, 2, (const int64_t[]){32, 4});
    st_writer_add(w, down, ST_DTYPE_F32, 2, (const int64_t[]){4, 32});
    if (st_writer_begin(w, path, &e) < 0 || st_writer_write(w, lora_up, sizeof lora_up, &e) < 0 ||
        st_writer_write(w, lora_down, sizeof lora_down, &e) < 0 || st_writer_finish(w, &e) < 0)
        PANIC("lora: %s", e.msg);
    st_writer_free(w);
}

/* max |a/sf − ref/sf| / max |ref/sf| over the step's output. */
static double rel_err(const struct value *lat, const double *denoised, double sf)
{
    const struct sd_latent *l = sd_latent_of(lat);
    double num = 0, den = 1e-12;
    for (int i = 0; l && i < PER; i++) {
        num = fmax(num, fabs(l->samples[i] - denoised[i] / sf));
        den = fmax(den, fabs(denoised[i] / sf));
    }
    return l ? num / den : 1e9;
}

static double latent_diff(const struct value *a, const struct value *b)
{
    const struct sd_latent *x = sd_latent_of(a), *y = sd_latent_of(b);
    double d = 0;
    for (int i = 0; x && y && i < PER; i++)
        d = fmax(d, fabs(x->samples[i] - y->samples[i]));
    return x && y ? d : -1;
}

static void cfg_mix(const double *c, const double *u, double *out)
{
    for (int i = 0; i < PER; i++)
        out[i] = u[i] + (c[i] - u[i]) * STEP_CFG;
}

static void test_step(const char *dir, const char *ckpt_path)
{
    char msg[256];
    const char *cn[] = {"ckpt_name"};
    struct value *cv[] = {value_new_string("tiny.safetensors")}, *mcv[4];
    if (run(&sd_checkpoint_loader_simple, cn, cv, 1, mcv, msg, sizeof msg) < 0) {
        ok(0, "checkpoint: %s", msg);
        return;
    }
    struct value *model = mcv[0], *clip = mcv[1];
    value_unref(mcv[2]);
    struct value *conds[3] = {encode(clip, "a red fox"), encode(clip, "blurry, grey"),
                              encode(clip, "")};
    struct sd_latent *sl = sd_latent_new(1, 4, LH, LW);
    for (int i = 0; i < PER; i++)
        sl->samples[i] = (float)(0.9 * sin(0.21 * i) + 0.3 * cos(0.05 * i));
    struct value *lat = sd_latent_value(sl);

    /* the step's inputs, in float as the pipeline forms them */
    static struct step s;
    const struct sd_model *m = sd_model_of(model);
    struct model_config cfg;
    sd_model_unet_patcher(m, &cfg);
    s.arch = &cfg.unet;
    float *sig = NULL, noise[PER];
    int nsig = 0;
    struct err e = {0};
    EXPECT_OK(sampling_sigmas_for_ksampler(&m->ms, SAMPLING_SCHEDULER_NORMAL, 0, 1, STEP_DENOISE,
                                           -1, -1, 0, &sig, &nsig, &e));
    s.sigma = sig[0];
    xfree(sig);
    s.t = sampling_discrete_timestep(&m->ms, s.sigma);
    s.sf = m->latent->scale_factor;
    EXPECT_OK(sampling_prepare_noise(STEP_SEED, NULL, 0, 1, PER, SAMPLING_RANDN_V2, noise, &e));
    for (int i = 0; i < PER; i++)
        s.x[i] = noise[i] * s.sigma + sl->samples[i] * (float)s.sf;
    for (int k = 0; k < 3; k++) {
        const struct sd_cond *c = sd_cond_of(conds[k]);
        for (int i = 0; i < 77 * 64; i++)
            s.ctx[k][i] = c->entries[0].cond[i];
    }
    struct st_file *uf = NULL;
    EXPECT_OK(st_open(ckpt_path, &uf, &e));
    ref_file = uf;
    ref_prefix = "model.diffusion_model.";
    ref_heads = cfg.unet.heads;
    static double c0[PER], u0[PER], mix[PER], e0[PER];

    /* plain CFG: the harness itself */
    struct value *plain = ksample(model, conds[0], conds[1], lat, msg);
    ref_x0(&s, s.x, 0, c0);
    ref_x0(&s, s.x, 1, u0);
    cfg_mix(c0, u0, mix);
    double err = rel_err(plain, mix, s.sf);
    ok(err < 3e-4, "one plain KSampler step equals the float64 step (%.2e)", err);

    /* HyperTile: tile 32 (4 latent px), 3 candidates, depths 0 and 1 */
    {
        const char *nm[] = {"tile_size", "swap_size", "max_depth", "scale_depth"};
        struct value *v[] = {value_new_int(ht_tile), value_new_int(ht_swap),
                             value_new_int(ht_depth), value_new_bool(0)};
        struct value *mh = patch(&sd_hypertile, model, nm, v, 4, msg);
        struct value *out = mh ? ksample(mh, conds[0], conds[1], lat, msg) : NULL;
        ok(out != NULL, "KSampler with HyperTile runs (%s)", out ? "ok" : msg);
        sampling_rng_seed(&ht_rng, STEP_SEED); /* prepare_noise's manual_seed and randn */
        float tmp[PER];
        sampling_rng_randn(&ht_rng, tmp, PER, SAMPLING_RANDN_V2);
        ht_n = ht_i = 0;
        ref_attn1_tiles = ref_tiles;
        ref_x0(&s, s.x, 0, c0);
        ht_i = 0; /* the uncond shares the call's draws */
        ref_x0(&s, s.x, 1, u0);
        ref_attn1_tiles = NULL;
        cfg_mix(c0, u0, mix);
        int tiled = 0;
        char picks[128] = "";
        for (int i = 0; i < ht_n; i++) {
            tiled += ht_pick[i].nh * ht_pick[i].nw > 1;
            snprintf(picks + strlen(picks), sizeof picks - strlen(picks), " %dx%d", ht_pick[i].nh,
                     ht_pick[i].nw);
        }
        err = rel_err(out, mix, s.sf);
        ok(err < 3e-4 && tiled == ht_n && ht_n == 10,
           "HyperTile step equals float64 with tiled self-attention (%.2e; tiles%s)", err, picks);
        ok(latent_diff(out, plain) > 1e-4, "HyperTile changes the step (%.2e)",
           latent_diff(out, plain));
        value_unref(out);
        value_unref(mh);
    }

    /* SelfAttentionGuidance: scale 0.8, blur_sigma 1.5 (alone, then over a LoRA) */
    char lpath[400];
    snprintf(lpath, sizeof lpath, "%s/loras/l.safetensors", dir);
    write_lora(lpath);
    for (int with_lora = 0; with_lora < 2; with_lora++) {
        const char *nm[] = {"scale", "blur_sigma"};
        struct value *v[] = {value_new_float(0.8), value_new_float(1.5)};
        struct value *base = model, *lm = NULL;
        if (with_lora) {
            const char *ln[] = {"model", "lora_name", "strength_model"};
            struct value *lv[] = {value_ref(model), value_new_string("l.safetensors"),
                                  value_new_float(1.0)},
                         *lo[4];
            lm = run(&sd_lora_loader_model_only, ln, lv, 3, lo, msg, sizeof msg) < 0 ? NULL
                                                                                   : lo[0];
            ok(lm != NULL, "LoraLoaderModelOnly (%s)", lm ? "ok" : msg);
            base = lm;
        }
        struct value *ms = base ? patch(&sd_self_attention_guidance, base, nm, v, 2, msg) : NULL;
        struct value *out = ms ? ksample(ms, conds[0], conds[1], lat, msg) : NULL;
        ok(out != NULL, "KSampler with SelfAttentionGuidance%s runs (%s)",
           with_lora ? " over a LoRA" : "", out ? "ok" : msg);
        static double colsum[4], deg[PER], noised[PER], sagx0[PER];
        ref_w_hook = with_lora ? lora_hook : NULL;
        ref_x0(&s, s.x, 0, c0);
        ref_attn1_colsum = colsum;
        ref_x0(&s, s.x, 1, u0);
        ref_attn1_colsum = NULL;
        cfg_mix(c0, u0, mix);
        float u0f[PER];
        for (int i = 0; i < PER; i++)
            u0f[i] = (float)u0[i];
        ok(ref_blur_map(u0f, 1, 4, LH, LW, colsum, 4, 1.5, deg) == 0, "reference blur map");
        for (int i = 0; i < PER; i++)
            noised[i] = deg[i] + s.x[i] - u0[i];
        ref_x0(&s, noised, 1, sagx0);
        ref_w_hook = NULL;
        int marked = 0;
        for (int i = 0; i < 4; i++)
            marked += colsum[i] > 1.0;
        for (int i = 0; i < PER; i++)
            mix[i] += (deg[i] - sagx0[i]) * 0.8;
        err = rel_err(out, mix, s.sf);
        ok(err < 3e-4, "SAG%s step equals float64 (%.2e; %d of 4 middle tokens blurred)",
           with_lora ? " over a LoRA" : "", err, marked);
        if (with_lora && out) {
            /* the other order: SAG first, the LoRA on the patched MODEL */
            struct value *ms2 = patch(&sd_self_attention_guidance, model, nm,
                                      (struct value *[]){value_new_float(0.8),
                                                         value_new_float(1.5)},
                                      2, msg);
            const char *ln[] = {"model", "lora_name", "strength_model"};
            struct value *lv[] = {value_ref(ms2), value_new_string("l.safetensors"),
                                  value_new_float(1.0)},
                         *lo[4] = {0};
            run(&sd_lora_loader_model_only, ln, lv, 3, lo, msg, sizeof msg);
            struct value *out2 = lo[0] ? ksample(lo[0], conds[0], conds[1], lat, msg) : NULL;
            ok(out2 && latent_diff(out, out2) == 0.0,
               "SAG then LoRA gives the same latent as LoRA then SAG (%g)",
               latent_diff(out, out2));
            value_unref(out2);
            value_unref(lo[0]);
            value_unref(ms2);
        }
        value_unref(out);
        value_unref(ms);
        value_unref(lm);
    }

    /* PerpNeg: neg_scale 0.7 with the empty prompt */
    {
        const char *nm[] = {"empty_conditioning", "neg_scale"};
        struct value *v[] = {value_ref(conds[2]), value_new_float(0.7)};
        struct value *mp = patch(&sd_perp_neg, model, nm, v, 2, msg);
        struct value *out = mp ? ksample(mp, conds[0], conds[1], lat, msg) : NULL;
        ok(out != NULL, "KSampler with PerpNeg runs (%s)", out ? "ok" : msg);
        ref_x0(&s, s.x, 0, c0);
        ref_x0(&s, s.x, 1, u0);
        ref_x0(&s, s.x, 2, e0);
        double dot = 0, nn = 0;
        for (int i = 0; i < PER; i++) {
            double p = c0[i] - e0[i], q = u0[i] - e0[i];
            dot += p * q;
            nn += p * p;
        }
        for (int i = 0; i < PER; i++) {
            double p = c0[i] - e0[i], q = u0[i] - e0[i];
            mix[i] = e0[i] + STEP_CFG * (p - (q - dot / nn * p) * 0.7);
        }
        err = rel_err(out, mix, s.sf);
        ok(err < 3e-4, "PerpNeg step equals float64 perp_neg over the three passes (%.2e)", err);
        /* RescaleCFG after PerpNeg replaces its cfg function: the plain rescale result */
        const char *rn[] = {"multiplier"};
        struct value *rv[] = {value_new_float(0.0)};
        struct value *mr = mp ? patch(&sd_rescale_cfg, mp, rn, rv, 1, msg) : NULL;
        struct value *out_r = mr ? ksample(mr, conds[0], conds[1], lat, msg) : NULL;
        ok(out_r && latent_diff(out_r, plain) < 1e-3,
           "RescaleCFG (multiplier 0) after PerpNeg is plain CFG again (%.2e)",
           latent_diff(out_r, plain));
        value_unref(out_r);
        value_unref(mr);
        value_unref(out);
        value_unref(mp);
    }

    /* bad input: SAG on a second HyperTile refused; PerpNeg without conditioning */
    {
        const char *nm[] = {"tile_size", "swap_size", "max_depth", "scale_depth"};
        struct value *v[] = {value_new_int(64), value_new_int(2), value_new_int(0),
                             value_new_bool(0)};
        struct value *h1 = patch(&sd_hypertile, model, nm, v, 4, msg);
        struct value *v2[] = {value_new_int(64), value_new_int(2), value_new_int(0),
                              value_new_bool(0)};
        struct value *h2 = h1 ? patch(&sd_hypertile, h1, nm, v2, 4, msg) : NULL;
        ok(h1 && !h2 && strstr(msg, "already has a HyperTile"), "a second HyperTile: %s", msg);
        const char *pn[] = {"empty_conditioning", "neg_scale"};
        struct value *pv[] = {value_ref(lat), value_new_float(1.0)};
        struct value *bad = patch(&sd_perp_neg, model, pn, pv, 2, msg);
        ok(!bad && strstr(msg, "empty_conditioning"), "PerpNeg with a LATENT: %s", msg);
        value_unref(h1);
    }
    st_close(uf);
    ref_file = NULL;
    value_unref(plain);
    for (int k = 0; k < 3; k++)
        value_unref(conds[k]);
    value_unref(lat);
    value_unref(model);
    value_unref(clip);
    unlink(lpath);
}

int main(void)
{
    char dir[] = "/tmp/test_sd_patches.XXXXXX", sub[320], path[400];
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    mkdir(sub, 0755);
    snprintf(path, sizeof path, "%s/tiny.safetensors", sub);
    snprintf(sub, sizeof sub, "%s/loras", dir);
    mkdir(sub, 0755);
    struct ckpt_gen_opts o;
    struct err e = {0};
    ckpt_gen_opts_default(&o);
    EXPECT_OK(ckpt_gen_write(&o, path, &e));
    tensor_threads_set(2);
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    EXPECT_OK(mm_new(&mc, &mm, &e));
    env.models_dir = dir;
    env.mm = mm;
    test_draws();
    test_blur();
    test_step(dir, path);
    mm_free(mm);
    unlink(path);
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    rmdir(sub);
    snprintf(sub, sizeof sub, "%s/loras", dir);
    rmdir(sub);
    rmdir(dir);
    return harness_done();
}
