/*
 * test_models_lora — LoRA key mapping (memory.md §5.3 examples, kohya / LoCon /
 * diffusers-processor / PEFT names) and the patches it produces: the weights a
 * patched patcher hands out equal W + strength * alpha/rank * up @ down, exactly the
 * modules named, nothing else; unknown keys are counted; LoRAs for other models fail
 * with a clear error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "harness.h"
#include "memmgr.h"
#include "checkpoint.h"
#include "lora.h"
#include "family.h"

static char dir[64];

static void test_map(void)
{
    struct model_config c;
    sd15_config_canonical(&c);
    static const char *const cases[][2] = {
        {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q",
         "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight"},
        {"lora_unet_up_blocks_1_attentions_2_proj_out",
         "model.diffusion_model.output_blocks.5.1.proj_out.weight"},
        {"lora_unet_mid_block_attentions_0_transformer_blocks_0_ff_net_0_proj",
         "model.diffusion_model.middle_block.1.transformer_blocks.0.ff.net.0.proj.weight"},
        {"lora_unet_down_blocks_1_resnets_0_conv1",
         "model.diffusion_model.input_blocks.4.0.in_layers.2.weight"},
        {"lora_unet_input_blocks_4_0_in_layers_2",
         "model.diffusion_model.input_blocks.4.0.in_layers.2.weight"},
        {"lora_unet_up_blocks_0_upsamplers_0_conv", "model.diffusion_model.output_blocks.2.1.conv.weight"},
        {"lora_unet_up_blocks_2_upsamplers_0_conv", "model.diffusion_model.output_blocks.8.2.conv.weight"},
        {"lora_unet_mid_block_resnets_1_time_emb_proj",
         "model.diffusion_model.middle_block.2.emb_layers.1.weight"},
        {"lora_unet_up_blocks_3_resnets_2_conv_shortcut",
         "model.diffusion_model.output_blocks.11.0.skip_connection.weight"},
        {"lora_unet_down_blocks_2_downsamplers_0_conv", "model.diffusion_model.input_blocks.9.0.op.weight"},
        {"lora_unet_time_embedding_linear_2", "model.diffusion_model.time_embed.2.weight"},
        {"unet.down_blocks.0.attentions.1.transformer_blocks.0.attn2.processor.to_out",
         "model.diffusion_model.input_blocks.2.1.transformer_blocks.0.attn2.to_out.0.weight"},
        {"down_blocks.0.attentions.1.transformer_blocks.0.attn1.processor.to_k",
         "model.diffusion_model.input_blocks.2.1.transformer_blocks.0.attn1.to_k.weight"},
        {"lycoris_up_blocks_3_attentions_0_transformer_blocks_0_attn2_to_v",
         "model.diffusion_model.output_blocks.9.1.transformer_blocks.0.attn2.to_v.weight"},
        {"diffusion_model.out.2", "model.diffusion_model.out.2.weight"},
        {"lora_te_text_model_encoder_layers_11_mlp_fc2",
         "cond_stage_model.transformer.text_model.encoder.layers.11.mlp.fc2.weight"},
        {"lora_te1_text_model_encoder_layers_0_self_attn_q_proj",
         "cond_stage_model.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight"},
        {"text_encoder.text_model.encoder.layers.3.self_attn.out_proj",
         "cond_stage_model.transformer.text_model.encoder.layers.3.self_attn.out_proj.weight"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char key[256] = "";
        int comp = lora_map_prefix(&c, cases[i][0], key, sizeof(key));
        ok(comp >= 0 && !strcmp(key, cases[i][1]), "%s -> %s (got %s)", cases[i][0], cases[i][1],
           key);
    }
    char key[256];
    ok(lora_map_prefix(&c, "lora_unet_down_blocks_3_attentions_0_proj_in", key, sizeof(key)) < 0,
       "no attention at level 3: unmapped");
    ok(lora_map_prefix(&c, "lora_te_text_model_encoder_layers_12_mlp_fc1", key, sizeof(key)) < 0,
       "layer 12 does not exist: unmapped");
}

/* ---- writing LoRA files ---------------------------------------------------------------------- */

struct lt {
    char name[200];
    int ndim;
    int64_t shape[4];
    float *v; /* owned */
};

static struct lt lts[32];
static int nlt;

static float *add_t(const char *name, int ndim, const int64_t *shape, double a)
{
    struct lt *t = &lts[nlt++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->ndim = ndim;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        n *= shape[i];
    }
    t->v = xmalloc((size_t)(n ? n : 1) * 4);
    for (int64_t i = 0; i < n; i++)
        t->v[i] = (float)(0.1 * sin(a * (double)i + a));
    return t->v;
}

static void add_pair(const char *prefix, const char *up_sfx, const char *down_sfx, int64_t out,
                     int64_t in, int64_t kh, int64_t rank, double alpha)
{
    char n[200];
    snprintf(n, sizeof(n), "%s%s", prefix, up_sfx);
    if (kh > 1)
        add_t(n, 4, (const int64_t[]){out, rank, 1, 1}, 0.3 + nlt);
    else
        add_t(n, 2, (const int64_t[]){out, rank}, 0.3 + nlt);
    snprintf(n, sizeof(n), "%s%s", prefix, down_sfx);
    if (kh > 1)
        add_t(n, 4, (const int64_t[]){rank, in, kh, kh}, 0.7 + nlt);
    else
        add_t(n, 2, (const int64_t[]){rank, in}, 0.7 + nlt);
    if (alpha > 0) {
        snprintf(n, sizeof(n), "%s.alpha", prefix);
        add_t(n, 0, NULL, 0)[0] = (float)alpha;
    }
}

static void write_lora(const char *path)
{
    struct st_writer *w = st_writer_new();
    struct err e = {0};
    for (int i = 0; i < nlt; i++)
        st_writer_add(w, lts[i].name, ST_DTYPE_F32, lts[i].ndim, lts[i].shape);
    st_writer_begin(w, path, &e);
    for (int i = 0; i < nlt; i++) {
        int64_t n = 1;
        for (int d = 0; d < lts[i].ndim; d++)
            n *= lts[i].shape[d];
        st_writer_write(w, lts[i].v, (uint64_t)n * 4, &e);
    }
    st_writer_finish(w, &e);
    st_writer_free(w);
}

static void clear_lts(void)
{
    for (int i = 0; i < nlt; i++)
        xfree(lts[i].v);
    nlt = 0;
}

static const struct lt *find_lt(const char *name)
{
    for (int i = 0; i < nlt; i++)
        if (!strcmp(lts[i].name, name))
            return &lts[i];
    return NULL;
}

/* Check that `key` as handed out by p equals base + s * scale * up @ down. */
static void check_patched(struct patcher *p, const char *key, const char *prefix,
                          const char *up_sfx, const char *down_sfx, double s, double scale)
{
    struct patcher_model *m = patcher_model_of(p);
    int layer, idx;
    if (patcher_model_find(m, key, &layer, &idx) < 0) {
        ok(0, "find %s", key);
        return;
    }
    enum tensor_dtype dt;
    int ndim;
    int64_t shape[4];
    const float *base = patcher_model_host_data(m, layer, idx, &dt, &ndim, shape);
    int64_t out = shape[0], n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    int64_t in = n / out;
    char un[200], dn[200];
    snprintf(un, sizeof(un), "%s%s", prefix, up_sfx);
    snprintf(dn, sizeof(dn), "%s%s", prefix, down_sfx);
    const struct lt *U = find_lt(un), *D = find_lt(dn);
    struct tensor *const *w;
    struct err e = {0};
    if (!U || !D || dt != TENSOR_F32 || patcher_acquire(p, layer, &w, &e) < 0) {
        ok(0, "acquire %s (%s)", key, e.msg);
        return;
    }
    float *got = xmalloc((size_t)n * 4);
    tensor_read_f32(w[idx], got, n, &e);
    patcher_release(p, layer);
    int64_t r = D->shape[0];
    double worst = 0, dmax = 0;
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) {
            double d = 0;
            for (int64_t k = 0; k < r; k++)
                d += (double)U->v[o * r + k] * D->v[k * in + i];
            double want = base[o * in + i] + s * scale * d;
            worst = fmax(worst, fabs(got[o * in + i] - want));
            dmax = fmax(dmax, fabs(s * scale * d));
        }
    ok(worst < 1e-5 && dmax > 1e-4, "%s patched as W + %g * %g * up@down (max err %.2e, delta %.2e)",
       key, s, scale, worst, dmax);
    xfree(got);
}

static void check_unpatched(struct patcher *p, const char *key)
{
    struct patcher_model *m = patcher_model_of(p);
    int layer, idx;
    patcher_model_find(m, key, &layer, &idx);
    enum tensor_dtype dt;
    int ndim;
    int64_t shape[4];
    const float *base = patcher_model_host_data(m, layer, idx, &dt, &ndim, shape);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    struct tensor *const *w;
    struct err e = {0};
    patcher_acquire(p, layer, &w, &e);
    float *got = xmalloc((size_t)n * 4);
    tensor_read_f32(w[idx], got, n, &e);
    patcher_release(p, layer);
    ok(memcmp(got, base, (size_t)n * 4) == 0, "%s untouched", key);
    xfree(got);
}

static void test_apply(void)
{
    char ck_path[128], lora[128];
    snprintf(ck_path, sizeof(ck_path), "%s/tiny.safetensors", dir);
    snprintf(lora, sizeof(lora), "%s/lora.safetensors", dir);
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    struct err e = {0};
    EXPECT_OK(ckpt_gen_write(&o, ck_path, &e));
    struct model_ckpt ck;
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    if (model_ckpt_load(ck_path, MODEL_LOAD_UNET | MODEL_LOAD_CLIP, f32, &ck, &e) < 0) {
        ok(0, "load: %s", e.msg);
        return;
    }
    /* Tiny widths: level 0 = 32, level 1 = 64, level 2 = 96; CLIP 64, MLP 256. */
    const char *A = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
    const char *B = "lora_unet_down_blocks_1_resnets_0_conv1"; /* LoCon 3x3 */
    const char *C = "unet.mid_block.attentions.0.transformer_blocks.0.attn2.processor.to_out";
    const char *Dp = "lora_te_text_model_encoder_layers_1_mlp_fc1";
    const char *E = "text_encoder.text_model.encoder.layers.0.self_attn.q_proj";
    const char *F = "lora_unet_up_blocks_1_attentions_2_proj_out"; /* 1x1 conv, linear factors */
    add_pair(A, ".lora_up.weight", ".lora_down.weight", 32, 32, 1, 4, 2.0);
    add_pair(B, ".lora_up.weight", ".lora_down.weight", 64, 32, 3, 4, 8.0);
    add_pair(C, "_lora.up.weight", "_lora.down.weight", 96, 96, 1, 2, 0);
    add_pair(Dp, ".lora_up.weight", ".lora_down.weight", 256, 64, 1, 4, 4.0);
    add_pair(E, ".lora_B.weight", ".lora_A.weight", 64, 64, 1, 8, 0);
    add_pair(F, ".lora_up.weight", ".lora_down.weight", 96, 96, 1, 4, 4.0);
    add_pair("lora_unet_nonexistent_block", ".lora_up.weight", ".lora_down.weight", 8, 8, 1, 2, 0);
    add_t("lora_unet_down_blocks_0_resnets_0_conv2.hada_w1_a", 2, (const int64_t[]){32, 2}, 1);
    write_lora(lora);

    struct patcher *u0 = patcher_new(ck.model[MODEL_UNET]), *c0 = patcher_new(ck.model[MODEL_CLIP]);
    struct patcher *u = patcher_clone(u0), *c = patcher_clone(c0);
    struct lora_stats st;
    int rc = lora_apply(lora, &ck.cfg, u, 0.75f, c, 1.5f, NULL, &st, &e);
    ok(rc == 0, "apply lora (%s)", e.msg);
    ok(st.unet_patched == 4 && st.clip_patched == 2 && st.unmatched == 2,
       "4 unet + 2 clip patches, 2 keys not loaded (got %d/%d/%d)", st.unet_patched,
       st.clip_patched, st.unmatched);
    EXPECT_EQ(patcher_patch_count(u0), 0);

    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    EXPECT_OK(mm_new(&mc, &mm, &e));
    struct mm_request req = {.n_models = 2, .models = {u, c}, .activation_bytes = 1 << 20};
    struct mm_report rep;
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    const char *P = "model.diffusion_model.", *T = "cond_stage_model.transformer.text_model.";
    char key[256];
    snprintf(key, sizeof(key), "%sinput_blocks.1.1.transformer_blocks.0.attn1.to_q.weight", P);
    check_patched(u, key, A, ".lora_up.weight", ".lora_down.weight", 0.75, 2.0 / 4);
    snprintf(key, sizeof(key), "%sinput_blocks.4.0.in_layers.2.weight", P);
    check_patched(u, key, B, ".lora_up.weight", ".lora_down.weight", 0.75, 8.0 / 4);
    snprintf(key, sizeof(key), "%smiddle_block.1.transformer_blocks.0.attn2.to_out.0.weight", P);
    check_patched(u, key, C, "_lora.up.weight", "_lora.down.weight", 0.75, 1.0);
    snprintf(key, sizeof(key), "%soutput_blocks.5.1.proj_out.weight", P);
    check_patched(u, key, F, ".lora_up.weight", ".lora_down.weight", 0.75, 1.0);
    snprintf(key, sizeof(key), "%sencoder.layers.1.mlp.fc1.weight", T);
    check_patched(c, key, Dp, ".lora_up.weight", ".lora_down.weight", 1.5, 1.0);
    snprintf(key, sizeof(key), "%sencoder.layers.0.self_attn.q_proj.weight", T);
    check_patched(c, key, E, ".lora_B.weight", ".lora_A.weight", 1.5, 1.0);
    snprintf(key, sizeof(key), "%sinput_blocks.1.1.transformer_blocks.0.attn1.to_k.weight", P);
    check_unpatched(u, key);
    mm_node_end(mm, &rep);
    /* The unpatched original hands out the clean weights again. */
    struct mm_request req0 = {.n_models = 1, .models = {u0}, .activation_bytes = 1 << 20};
    EXPECT_OK(mm_load_models(mm, &req0, &rep, &e));
    snprintf(key, sizeof(key), "%sinput_blocks.1.1.transformer_blocks.0.attn1.to_q.weight", P);
    check_unpatched(u0, key);
    mm_node_end(mm, &rep);
    clear_lts();

    /* A LoRA for another model: SDXL-width cross-attention factors. */
    add_pair("lora_unet_down_blocks_1_attentions_0_transformer_blocks_0_attn2_to_k",
             ".lora_up.weight", ".lora_down.weight", 64, 2048, 1, 4, 0);
    write_lora(lora);
    struct patcher *u2 = patcher_clone(u0);
    err_clear(&e);
    rc = lora_apply(lora, &ck.cfg, u2, 1, NULL, 1, NULL, NULL, &e);
    ok(rc == ERR_INVALID && strstr(e.msg, "lora.safetensors") &&
           strstr(e.msg, "attn2_to_k.lora_up.weight") && strstr(e.msg, "another model"),
       "mis-shaped LoRA: %s", e.msg);
    clear_lts();
    add_pair("lora_transformer_single_blocks_0_attn_to_q", ".lora_up.weight", ".lora_down.weight",
             8, 8, 1, 2, 0);
    write_lora(lora);
    err_clear(&e);
    rc = lora_apply(lora, &ck.cfg, u2, 1, NULL, 1, NULL, NULL, &e);
    ok(rc == ERR_INVALID && strstr(e.msg, "none of its") && strstr(e.msg, "another model"),
       "LoRA with no SD1.x keys: %s", e.msg);
    clear_lts();
    err_clear(&e);
    ok(lora_apply(ck_path, &ck.cfg, u2, 1, NULL, 1, NULL, NULL, &e) == ERR_INVALID,
       "a checkpoint is not a LoRA: %s", e.msg);
    patcher_unref(u2);

    mm_unload(mm, ck.model[MODEL_UNET]);
    mm_unload(mm, ck.model[MODEL_CLIP]);
    mm_free(mm);
    patcher_unref(u);
    patcher_unref(c);
    patcher_unref(u0);
    patcher_unref(c0);
    model_ckpt_release(&ck);
    unlink(ck_path);
    unlink(lora);
}

/* Shape of checkpoint weight `key` in p's model (ndim, or 0 when absent). */
static int shape_of(struct patcher *p, const char *key, int64_t shape[4])
{
    struct patcher_model *m = patcher_model_of(p);
    int layer, idx, ndim = 0;
    enum tensor_dtype dt;
    if (patcher_model_find(m, key, &layer, &idx) < 0 ||
        !patcher_model_host_data(m, layer, idx, &dt, &ndim, shape))
        return 0;
    return ndim;
}

/* Rows [row0, row0 + rows) of `key` as handed out by p equal base + s * scale * up @ down
 * (up_name/down_name NULL: equal base). */
static void check_rows(struct patcher *p, const char *key, int64_t row0, int64_t rows,
                       const char *up_name, const char *down_name, double s, double scale)
{
    struct patcher_model *m = patcher_model_of(p);
    int layer, idx, ndim;
    enum tensor_dtype dt;
    int64_t shape[4];
    struct err e = {0};
    struct tensor *const *w;
    if (patcher_model_find(m, key, &layer, &idx) < 0 || patcher_acquire(p, layer, &w, &e) < 0) {
        ok(0, "acquire %s (%s)", key, e.msg);
        return;
    }
    const float *base = patcher_model_host_data(m, layer, idx, &dt, &ndim, shape);
    int64_t in = shape[1], n = shape[0] * in;
    float *got = xmalloc((size_t)n * 4);
    tensor_read_f32(w[idx], got, n, &e);
    patcher_release(p, layer);
    const struct lt *U = up_name ? find_lt(up_name) : NULL, *D = down_name ? find_lt(down_name) : NULL;
    int64_t r = D ? D->shape[0] : 0;
    double worst = 0, dmax = 0;
    for (int64_t o = row0; o < row0 + rows; o++)
        for (int64_t i = 0; i < in; i++) {
            double d = 0;
            for (int64_t k = 0; k < r; k++)
                d += (double)U->v[(o - row0) * r + k] * D->v[k * in + i];
            double want = base[o * in + i] + s * scale * d;
            worst = fmax(worst, fabs(got[o * in + i] - want));
            dmax = fmax(dmax, fabs(s * scale * d));
        }
    ok(worst < 1e-5 && (!U || dmax > 1e-4), "%s rows %lld..%lld %s (max err %.2e, delta %.2e)",
       key, (long long)row0, (long long)(row0 + rows), U ? "patched" : "untouched", worst, dmax);
    xfree(got);
}

/* SDXL (sdxl.md §9): kohya LDM and diffusers UNet names, te1 (CLIP-L) and te2 (bigG), whose
 * q/k/v modules patch row blocks of OpenCLIP's fused in_proj; k, absent from the file,
 * keeps its rows. */
static void test_apply_sdxl(void)
{
    char ck_path[128], lora[128];
    snprintf(ck_path, sizeof(ck_path), "%s/tiny_xl.safetensors", dir);
    snprintf(lora, sizeof(lora), "%s/lora_xl.safetensors", dir);
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    sdxl_config_tiny(&o.cfg);
    struct err e = {0};
    EXPECT_OK(ckpt_gen_write(&o, ck_path, &e));
    struct model_ckpt ck;
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    if (model_ckpt_load(ck_path, MODEL_LOAD_UNET | MODEL_LOAD_CLIP, f32, &ck, &e) < 0) {
        ok(0, "load: %s", e.msg);
        return;
    }
    struct patcher *u = patcher_new(ck.model[MODEL_UNET]), *c = patcher_new(ck.model[MODEL_CLIP]);
    struct patcher *g = patcher_new(ck.model[MODEL_CLIP2]);
    const char *P = "model.diffusion_model.", *T1 = "conditioner.embedders.0.transformer.text_model.",
               *T2 = "conditioner.embedders.1.model.encoder.layers."; /* names once loaded */
    char kq[256], kl[256], kin[256], kfc[256], kout[256];
    snprintf(kq, sizeof(kq), "%sinput_blocks.4.1.transformer_blocks.0.attn1.to_q.weight", P);
    snprintf(kl, sizeof(kl), "%slabel_emb.0.0.weight", P);
    snprintf(kin, sizeof(kin), "%s0.self_attn.in_proj.weight", T2);
    snprintf(kfc, sizeof(kfc), "%s1.mlp.fc1.weight", T2);
    snprintf(kout, sizeof(kout), "%sencoder.layers.0.self_attn.out_proj.weight", T1);
    int64_t sq[4], sl[4], sin_[4], sfc[4], sout[4];
    if (shape_of(u, kq, sq) != 2 || shape_of(u, kl, sl) != 2 || shape_of(g, kin, sin_) != 2 ||
        shape_of(g, kfc, sfc) != 2 || shape_of(c, kout, sout) != 2) {
        ok(0, "tiny SDXL has the weights this test patches (%d %d %d %d %d)", shape_of(u, kq, sq),
           shape_of(u, kl, sl), shape_of(g, kin, sin_), shape_of(g, kfc, sfc), shape_of(c, kout, sout));
        goto out;
    }
    int64_t d = sin_[1];
    ok(sin_[0] == 3 * d, "bigG in_proj is fused [3d, d] (%lld x %lld)", (long long)sin_[0],
       (long long)d);
    const char *A = "lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q"; /* kohya LDM */
    const char *B = "lora_unet_add_embedding_linear_1";                            /* diffusers */
    const char *Q = "lora_te2_text_model_encoder_layers_0_self_attn_q_proj";
    const char *V = "text_encoder_2.text_model.encoder.layers.0.self_attn.v_proj";
    const char *F = "lora_te2_text_model_encoder_layers_1_mlp_fc1";
    const char *O = "lora_te1_text_model_encoder_layers_0_self_attn_out_proj";
    add_pair(A, ".lora_up.weight", ".lora_down.weight", sq[0], sq[1], 1, 4, 2.0);
    add_pair(B, ".lora_up.weight", ".lora_down.weight", sl[0], sl[1], 1, 2, 0);
    add_pair(Q, ".lora_up.weight", ".lora_down.weight", d, d, 1, 4, 2.0);
    add_pair(V, ".lora_B.weight", ".lora_A.weight", d, d, 1, 2, 0);
    add_pair(F, ".lora_up.weight", ".lora_down.weight", sfc[0], sfc[1], 1, 4, 4.0);
    add_pair(O, ".lora_up.weight", ".lora_down.weight", sout[0], sout[1], 1, 2, 0);
    write_lora(lora);
    struct lora_stats st;
    int rc = lora_apply(lora, &ck.cfg, u, 0.5f, c, 1.5f, g, &st, &e);
    ok(rc == 0, "apply SDXL lora (%s)", e.msg);
    ok(st.unet_patched == 2 && st.clip_patched == 4 && st.unmatched == 0,
       "2 unet + 4 text-encoder patches, all keys loaded (got %d/%d/%d)", st.unet_patched,
       st.clip_patched, st.unmatched);
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    EXPECT_OK(mm_new(&mc, &mm, &e));
    struct mm_request req = {.n_models = 3, .models = {u, c, g}, .activation_bytes = 1 << 20};
    struct mm_report rep;
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    check_patched(u, kq, A, ".lora_up.weight", ".lora_down.weight", 0.5, 2.0 / 4);
    check_patched(u, kl, B, ".lora_up.weight", ".lora_down.weight", 0.5, 1.0);
    check_patched(c, kout, O, ".lora_up.weight", ".lora_down.weight", 1.5, 1.0);
    check_patched(g, kfc, F, ".lora_up.weight", ".lora_down.weight", 1.5, 4.0 / 4);
    char un[200], dn[200];
    snprintf(un, sizeof(un), "%s.lora_up.weight", Q);
    snprintf(dn, sizeof(dn), "%s.lora_down.weight", Q);
    check_rows(g, kin, 0, d, un, dn, 1.5, 2.0 / 4);
    check_rows(g, kin, d, d, NULL, NULL, 0, 0);
    snprintf(un, sizeof(un), "%s.lora_B.weight", V);
    snprintf(dn, sizeof(dn), "%s.lora_A.weight", V);
    check_rows(g, kin, 2 * d, d, un, dn, 1.5, 1.0);
    mm_node_end(mm, &rep);
    clear_lts();

    /* A q module whose rows do not fit the block: an error naming the file and tensor. */
    add_pair(Q, ".lora_up.weight", ".lora_down.weight", d + 1, d, 1, 4, 0);
    write_lora(lora);
    struct patcher *g2 = patcher_new(ck.model[MODEL_CLIP2]);
    err_clear(&e);
    rc = lora_apply(lora, &ck.cfg, NULL, 1, NULL, 1, g2, NULL, &e);
    ok(rc == ERR_INVALID && strstr(e.msg, "lora_xl.safetensors") && strstr(e.msg, "q_proj"),
       "mis-shaped te2 q_proj: %s", e.msg);
    patcher_unref(g2);
    clear_lts();
    mm_unload(mm, ck.model[MODEL_UNET]);
    mm_unload(mm, ck.model[MODEL_CLIP]);
    mm_unload(mm, ck.model[MODEL_CLIP2]);
    mm_free(mm);
out:
    patcher_unref(u);
    patcher_unref(c);
    patcher_unref(g);
    model_ckpt_release(&ck);
    unlink(ck_path);
    unlink(lora);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_models_lora.XXXXXX");
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    test_map();
    test_apply();
    test_apply_sdxl();
    rmdir(dir);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
