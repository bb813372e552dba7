/*
 * test_models_io — safetensors reader/writer, the SD1.5 layout, the checkpoint
 * generator and checkpoint detection/validation (bad input included; the damaged-file
 * cases run for SD1.5 and SDXL alike).
 * Argument 1: the fixtures directory (tests/fixtures/models).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "altstack.h"
#include "ckpt_gen.h"
#include "harness.h"
#include "safetensors.h"
#include "checkpoint.h"
#include "model_config.h"
#include "family.h"

static const char *fixtures;
static char tmpdir[256];

static const char *tmp_path(const char *name)
{
    static char buf[64][512]; /* enough distinct live paths for one test run */
    static int i;
    i = (i + 1) % 64;
    snprintf(buf[i], sizeof(buf[i]), "%s/%s", tmpdir, name);
    return buf[i];
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp)
        PANIC("cannot create %s", path);
    fwrite(data, 1, n, fp);
    fclose(fp);
}

/* A file holding 8-byte length + header text + n_data zero bytes. */
static void write_raw_st(const char *path, const char *hdr, size_t n_data)
{
    size_t hl = strlen(hdr);
    unsigned char *b = xcalloc(1, 8 + hl + n_data);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, hdr, hl);
    write_file(path, b, 8 + hl + n_data);
    xfree(b);
}

static int open_err(const char *path, struct err *e)
{
    struct st_file *f = NULL;
    err_clear(e);
    int rc = st_open(path, &f, e);
    st_close(f);
    return rc;
}

/* ---- conversions ------------------------------------------------------------------------ */

static void test_conversions(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = st_f16_to_f32((uint16_t)h);
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
            continue; /* NaN payloads need not round trip */
        if (st_f32_to_f16(f) != h)
            bad++;
    }
    EXPECT_EQ(bad, 0);
    EXPECT_NEAR(st_f16_to_f32(0x3c00), 1.0, 0);
    EXPECT_NEAR(st_f16_to_f32(0x0001), 5.960464477539063e-08, 0); /* smallest subnormal */
    EXPECT_EQ(st_f32_to_f16(65520.0f), 0x7c00);                 /* rounds to inf */
    EXPECT_EQ(st_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);       /* tie to even */
    EXPECT_EQ(st_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);       /* tie to even (up) */
    EXPECT_EQ(st_f32_to_f16(2.98e-8f), 0x0000);                 /* below half the min */
    EXPECT_EQ(st_f32_to_f16(4.0e-8f), 0x0001);
    EXPECT_EQ(st_f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(st_f32_to_bf16(1.00390625f), 0x3f80);             /* tie to even */
    EXPECT_NEAR(st_bf16_to_f32(0x4049), 3.140625, 0);
}

/* ---- writer + reader ---------------------------------------------------------------------- */

static void test_roundtrip(void)
{
    struct err e = {0};
    const char *p = tmp_path("rt.safetensors");
    struct st_writer *w = st_writer_new();
    float a[6] = {1, -2, 3.5f, 0.25f, -0, 1e-3f};
    uint16_t h[3] = {st_f32_to_f16(1.5f), st_f32_to_f16(-2), st_f32_to_f16(0.1f)};
    uint16_t bf[2] = {st_f32_to_bf16(3), st_f32_to_bf16(-0.5f)};
    st_writer_add(w, "b.f32", ST_DTYPE_F32, 2, (const int64_t[]){2, 3});
    st_writer_add(w, "a.f16", ST_DTYPE_F16, 1, (const int64_t[]){3});
    st_writer_add(w, "c.bf16", ST_DTYPE_BF16, 1, (const int64_t[]){2});
    st_writer_add(w, "d.scalar", ST_DTYPE_F32, 0, NULL);
    st_writer_meta(w, "format", "pt");
    st_writer_meta(w, "quote\"key", "line\nbreak");
    EXPECT_OK(st_writer_begin(w, p, &e));
    float s = 7;
    EXPECT_OK(st_writer_write(w, a, sizeof(a), &e));
    EXPECT_OK(st_writer_write(w, h, sizeof(h), &e));
    EXPECT_OK(st_writer_write(w, bf, sizeof(bf), &e));
    EXPECT_OK(st_writer_write(w, &s, 4, &e));
    EXPECT_OK(st_writer_finish(w, &e));
    st_writer_free(w);

    struct st_file *f = NULL;
    EXPECT_OK(st_open(p, &f, &e));
    if (!f)
        return;
    EXPECT_EQ(f->n_tensors, 4);
    EXPECT_STR(f->tensors[0].name, "a.f16"); /* sorted by name */
    EXPECT_STR(st_meta_get(f, "format"), "pt");
    EXPECT_STR(st_meta_get(f, "quote\"key"), "line\nbreak");
    EXPECT_EQ((uintptr_t)f->data % 8, 0); /* writer pads the header to 8 bytes */
    const struct st_tensor *t = st_find(f, "b.f32");
    ok(t && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3, "b.f32 shape [2,3]");
    const float *view = t ? st_tensor_f32_view(f, t) : NULL;
    ok(view && (const void *)view >= (const void *)f->data && view[2] == 3.5f,
       "f32 tensor is a view into the mapping (no copy)");
    float out[6];
    const struct st_tensor *th = st_find(f, "a.f16");
    ok(th && !st_tensor_f32_view(f, th), "f16 tensor has no f32 view");
    EXPECT_OK(st_tensor_to_f32(f, th, out, &e));
    ok(out[0] == 1.5f && out[1] == -2 && fabsf(out[2] - 0.1f) < 1e-4f, "f16 values converted");
    EXPECT_OK(st_tensor_to_f32(f, st_find(f, "c.bf16"), out, &e));
    ok(out[0] == 3 && out[1] == -0.5f, "bf16 values converted");
    const struct st_tensor *sc = st_find(f, "d.scalar");
    ok(sc && sc->ndim == 0 && st_tensor_numel(sc) == 1, "scalar has one element");
    ok(st_find(f, "nope") == NULL && st_find(f, "__metadata__") == NULL, "unknown names not found");
    st_close(f);
}

static void expect_header_error(const char *hdr, size_t n_data, const char *needle)
{
    struct err e = {0};
    const char *p = tmp_path("bad.safetensors");
    write_raw_st(p, hdr, n_data);
    int rc = open_err(p, &e);
    ok(rc < 0 && strstr(e.msg, needle) && strstr(e.msg, p), "header %.50s -> error '%s' (got: %s)",
       hdr, needle, e.msg);
}

static void test_bad_headers(void)
{
    struct err e = {0};
    expect_header_error("{\"a\":", 0, "not valid JSON");
    expect_header_error("[1,2]", 0, "not a JSON object");
    expect_header_error("{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                        "unknown dtype 'F33'");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
                        "non-negative");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
                        "outside the data section");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8,
                        "need 8");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,0]}}", 8,
                        "outside the data section");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                        12, "overlaps");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                        8, "appears twice");
    expect_header_error("{\"__metadata__\":{\"k\":1}}", 0, "not a string");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "data_offsets");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                        "\"data_offsets\":[0,4]}}",
                        4, "dimensions");
    /* Huge shapes must not overflow into a "matching" size. */
    expect_header_error("{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
                        "\"data_offsets\":[0,0]}}",
                        0, "need");

    /* Length field problems. */
    const char *p = tmp_path("len.safetensors");
    unsigned char big[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
    write_file(p, big, sizeof(big));
    ok(open_err(p, &e) == ERR_TOO_LARGE && strstr(e.msg, "exceeds"), "huge header length: %s",
       e.msg);
    unsigned char lie[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    write_file(p, lie, 10);
    ok(open_err(p, &e) == ERR_INVALID && strstr(e.msg, "truncated"), "header past EOF: %s", e.msg);
    write_file(p, lie, 3);
    ok(open_err(p, &e) == ERR_INVALID && strstr(e.msg, "too short"), "3-byte file: %s", e.msg);
    ok(open_err(tmp_path("does-not-exist.safetensors"), &e) == ERR_NOT_FOUND &&
           strstr(e.msg, "does-not-exist"),
       "missing file: %s", e.msg);
    /* A zip is read as a torch checkpoint (test_models_pt); a bare pickle is refused. */
    const char *ck = tmp_path("model.ckpt");
    write_file(ck, "PK\x03\x04zzzzzzzzzz", 14);
    ok(open_err(ck, &e) == ERR_INVALID && strstr(e.msg, "no zip directory"),
       "broken .ckpt zip: %s", e.msg);
    const char *pk = tmp_path("model.safetensors");
    write_file(pk, "\x80\x02}q\x00(X\x00\x00\x00", 10);
    ok(open_err(pk, &e) == ERR_UNSUPPORTED && strstr(e.msg, "pickle"), "pickle content refused");
    /* Empty object, trailing spaces in the header: fine. */
    write_raw_st(pk, "{}      ", 0);
    EXPECT_EQ(open_err(pk, &e), 0);
}

/* ---- layout ------------------------------------------------------------------------------- */

struct tsv {
    char **names;
    char **shapes;
    size_t n;
};

struct cmp_ctx {
    struct tsv *t;
    size_t matched, mismatched;
    size_t per_comp[3];
};

static void on_key_cmp(void *user, const struct model_key *k)
{
    struct cmp_ctx *c = user;
    char shape[96];
    struct st_tensor tmp = {.ndim = k->ndim};
    memcpy(tmp.shape, k->shape, sizeof(k->shape));
    st_shape_str(&tmp, shape, sizeof(shape));
    c->per_comp[k->comp]++;
    for (size_t i = 0; i < c->t->n; i++) {
        if (strcmp(c->t->names[i], k->name) == 0) {
            if (strcmp(c->t->shapes[i], shape) == 0)
                c->matched++;
            else
                c->mismatched++;
            return;
        }
    }
    c->mismatched++;
}

/* The patcher layer the layout gives the canonical SD1.5 tensor `rel` of `comp`. */
struct layer_find {
    enum model_component comp;
    const char *rel;
    char *out;
    size_t size;
};

static void find_layer(void *user, const struct model_key *k)
{
    struct layer_find *f = user;
    if (k->comp == f->comp && strcmp(k->name + k->rel, f->rel) == 0)
        snprintf(f->out, f->size, "%s", k->layer);
}

static void layer_of(enum model_component comp, const char *rel, char *out, size_t size)
{
    struct model_config c;
    struct layer_find f = {comp, rel, out, size};
    sd15_config_canonical(&c);
    out[0] = 0;
    model_layout_build(&c, find_layer, &f);
}

static void count_key(void *user, const struct model_key *k)
{
    size_t *n = user;
    n[k->comp]++;
}

static void test_layout(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/sd15_keys.tsv", fixtures);
    FILE *fp = fopen(path, "r");
    ok(fp != NULL, "open %s", path);
    if (!fp)
        return;
    struct tsv t = {0};
    char line[512];
    while (fgets(line, sizeof(line), fp)) {
        if (line[0] == '#')
            continue;
        char *tab = strchr(line, '\t');
        if (!tab)
            continue;
        *tab = 0;
        tab[strcspn(tab + 1, "\r\n") + 1] = 0;
        t.names = xrealloc(t.names, (t.n + 1) * sizeof(char *));
        t.shapes = xrealloc(t.shapes, (t.n + 1) * sizeof(char *));
        t.names[t.n] = xstrdup(line);
        t.shapes[t.n] = xstrdup(tab + 1);
        t.n++;
    }
    fclose(fp);
    struct model_config c;
    sd15_config_canonical(&c);
    ok(sd15_config_is_canonical(&c), "canonical config is canonical");
    struct cmp_ctx cc = {.t = &t};
    size_t n = model_layout_build(&c, on_key_cmp, &cc);
    EXPECT_EQ(n, 1130);
    EXPECT_EQ(t.n, 1130);
    EXPECT_EQ(cc.matched, 1130);
    EXPECT_EQ(cc.mismatched, 0);
    EXPECT_EQ(cc.per_comp[MODEL_UNET], 686);
    EXPECT_EQ(cc.per_comp[MODEL_VAE], 248);
    EXPECT_EQ(cc.per_comp[MODEL_CLIP], 196);
    for (size_t i = 0; i < t.n; i++) {
        xfree(t.names[i]);
        xfree(t.shapes[i]);
    }
    xfree(t.names);
    xfree(t.shapes);

    /* §9.1's tiny configs keep the key sets. */
    size_t cnt[3] = {0};
    sd15_config_tiny(&c);
    ok(!sd15_config_is_canonical(&c), "tiny config is not canonical");
    model_layout_build(&c, count_key, cnt);
    ok(cnt[0] == 686 && cnt[1] == 248 && cnt[2] == 52, "tiny: 686/248/52 tensors (%zu/%zu/%zu)",
       cnt[0], cnt[1], cnt[2]);
    for (int l = 0; l < 4; l++)
        c.unet.mult[l] = c.vae.mult[l] = 1;
    memset(cnt, 0, sizeof(cnt));
    model_layout_build(&c, count_key, cnt);
    ok(cnt[0] == 682 && cnt[1] == 240, "mult [1,1,1,1]: 682/240 tensors (%zu/%zu)", cnt[0],
       cnt[1]);
    char ln[96];
    /* A spatial transformer streams as its norm + proj_in, then one layer per block
     * (proj_out with the last): small enough for a prefetch ring at low budgets. */
    layer_of(MODEL_UNET, "input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight", ln, sizeof(ln));
    EXPECT_STR(ln, "input_blocks.1.1.transformer_blocks.0");
    layer_of(MODEL_UNET, "input_blocks.1.1.proj_in.weight", ln, sizeof(ln));
    EXPECT_STR(ln, "input_blocks.1.1");
    layer_of(MODEL_UNET, "input_blocks.1.1.proj_out.bias", ln, sizeof(ln));
    EXPECT_STR(ln, "input_blocks.1.1.transformer_blocks.0");
    layer_of(MODEL_UNET, "middle_block.2.in_layers.0.weight", ln, sizeof(ln));
    EXPECT_STR(ln, "middle_block.2");
    layer_of(MODEL_UNET, "time_embed.2.bias", ln, sizeof(ln));
    EXPECT_STR(ln, "time_embed");
    layer_of(MODEL_VAE, "decoder.up.1.block.0.nin_shortcut.weight", ln, sizeof(ln));
    EXPECT_STR(ln, "decoder.up.1.block.0");
    layer_of(MODEL_VAE, "encoder.down.2.downsample.conv.bias", ln, sizeof(ln));
    EXPECT_STR(ln, "encoder.down.2.downsample");
    layer_of(MODEL_VAE, "decoder.conv_out.weight", ln, sizeof(ln));
    EXPECT_STR(ln, "decoder.out");
    layer_of(MODEL_CLIP, "encoder.layers.2.mlp.fc1.weight", ln, sizeof(ln));
    EXPECT_STR(ln, "encoder.layers.2");
}

/* ---- generator + detection ------------------------------------------------------------------ */

static int gen(const char *name, void (*tweak)(struct ckpt_gen_opts *), const char **path_out)
{
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    if (tweak)
        tweak(&o);
    struct err e = {0};
    const char *p = tmp_path(name);
    int rc = ckpt_gen_write(&o, p, &e);
    if (rc < 0)
        printf("# gen %s: %s\n", name, e.msg);
    *path_out = p;
    return rc;
}

static void t_f16(struct ckpt_gen_opts *o) { o->dtype = ST_DTYPE_F16; }
static void t_bf16(struct ckpt_gen_opts *o) { o->dtype = ST_DTYPE_BF16; }
static void t_variants(struct ckpt_gen_opts *o)
{
    o->flags |= CKPT_GEN_EXTRAS | CKPT_GEN_OLD_CLIP | CKPT_GEN_CONV_2D | CKPT_GEN_METADATA |
                CKPT_GEN_EMBED_F16;
}
static void t_sd2(struct ckpt_gen_opts *o)
{
    o->flags |= CKPT_GEN_OPENCLIP | CKPT_GEN_CONV_2D;
    o->cfg.unet.ctx_dim = 1024;
}
static void t_sd2_ctx(struct ckpt_gen_opts *o)
{
    o->cfg.unet.ctx_dim = 1024;
}
static void t_sdxl(struct ckpt_gen_opts *o) { o->flags |= CKPT_GEN_SDXL_MARK; }
static void t_refiner(struct ckpt_gen_opts *o) { sdxl_refiner_config_tiny(&o->cfg); }
/* 9 (inpainting) and 8 (instruct-pix2pix) input channels load (test_sd_concat); 5 is no
 * SD1.x model. */
static void t_in5(struct ckpt_gen_opts *o)
{
    o->cfg.unet.in_ch = 5;
}
static void t_depth2(struct ckpt_gen_opts *o)
{
    sd15_config_set_depth(&o->cfg, 2);
}

static void expect_probe_error(const char *name, void (*tweak)(struct ckpt_gen_opts *),
                               int code, const char *needle)
{
    const char *p;
    struct err e = {0};
    struct model_config c;
    if (gen(name, tweak, &p) < 0) {
        ok(0, "generate %s", name);
        return;
    }
    err_clear(&e);
    int rc = model_ckpt_probe(p, &c, &e);
    ok(rc == code && strstr(e.msg, needle) && strstr(e.msg, name), "%s refused: %s", name, e.msg);
    unlink(p);
}

static void test_generator_and_detection(void)
{
    const char *p32, *p16, *pbf;
    struct err e = {0};
    struct model_config c, tiny;
    sd15_config_tiny(&tiny);
    EXPECT_OK(gen("tiny32.safetensors", NULL, &p32));
    EXPECT_OK(gen("tiny16.safetensors", t_f16, &p16));
    EXPECT_OK(gen("tinybf.safetensors", t_bf16, &pbf));
    ok(model_ckpt_probe(p32, &c, &e) == 0, "tiny f32 loads (%s)", e.msg);
    ok(memcmp(&c, &tiny, sizeof(c)) == 0, "config derived from shapes equals the tiny config");
    EXPECT_OK(model_ckpt_probe(p16, &c, &e));
    EXPECT_OK(model_ckpt_probe(pbf, &c, &e));

    /* Same weights across dtypes, and deterministic. */
    struct st_file *a = NULL, *b = NULL, *bb = NULL;
    st_open(p32, &a, &e);
    st_open(p16, &b, &e);
    st_open(pbf, &bb, &e);
    const char *nm = "model.diffusion_model.input_blocks.4.0.in_layers.2.weight";
    const struct st_tensor *ta = a ? st_find(a, nm) : NULL, *tb = b ? st_find(b, nm) : NULL,
                           *tc = bb ? st_find(bb, nm) : NULL;
    if (ta && tb && tc) {
        uint64_t n = st_tensor_numel(ta);
        float *x = xmalloc(n * 4), *y = xmalloc(n * 4), *z = xmalloc(n * 4), *r = xmalloc(n * 4);
        st_tensor_to_f32(a, ta, x, &e);
        st_tensor_to_f32(b, tb, y, &e);
        st_tensor_to_f32(bb, tc, z, &e);
        ckpt_gen_fill(42, nm, MODEL_INIT_WEIGHT, ta->ndim, ta->shape, r, n);
        double m16 = 0, mbf = 0, sum2 = 0;
        int same = 1;
        for (uint64_t i = 0; i < n; i++) {
            m16 = fmax(m16, fabs(x[i] - y[i]));
            mbf = fmax(mbf, fabs(x[i] - z[i]));
            sum2 += (double)x[i] * x[i];
            same &= x[i] == r[i];
        }
        ok(same, "f32 file holds exactly ckpt_gen_fill's values");
        ok(m16 < 2e-3 && mbf < 2e-2, "f16/bf16 files hold the same weights (max diff %g, %g)", m16,
           mbf);
        /* N(0,1)/sqrt(fan_in): variance ~ 1/fan_in (fan_in = 32*9). */
        double var = sum2 / (double)n;
        ok(var > 0.8 / 288 && var < 1.2 / 288, "weight variance ~ 1/fan_in (%g)", var * 288);
        xfree(x);
        xfree(y);
        xfree(z);
        xfree(r);
    } else {
        ok(0, "open generated files");
    }
    st_close(a);
    st_close(b);
    st_close(bb);

    /* Variants that must load the same. */
    const char *pv;
    EXPECT_OK(gen("variants.safetensors", t_variants, &pv));
    err_clear(&e);
    ok(model_ckpt_probe(pv, &c, &e) == 0 && memcmp(&c, &tiny, sizeof(c)) == 0,
       "EMA/buffers/position_ids ignored, old CLIP names renamed, 2-D 1x1 convs accepted (%s)",
       e.msg);
    struct st_file *fv = NULL;
    st_open(pv, &fv, &e);
    ok(fv && st_meta_get(fv, "modelspec.title") && st_find(fv, "model_ema.decay") &&
           st_find(fv, "cond_stage_model.transformer.embeddings.token_embedding.weight"),
       "variant file really has the variants");
    st_close(fv);
    const char *pd;
    EXPECT_OK(gen("depth2.safetensors", t_depth2, &pd));
    ok(model_ckpt_probe(pd, &c, &e) == 0 && c.unet.depth[0] == 2 && c.unet.depth_mid == 2,
       "transformer depth 2 derived");
    unlink(pd);

    /* Other model types. */
    /* SD2's context width and Linear projections, but not its text encoder (3 tensors) */
    expect_probe_error("sd2.safetensors", t_sd2, ERR_INVALID, "text encoder incomplete");
    expect_probe_error("sd2ctx.safetensors", t_sd2_ctx, ERR_UNSUPPORTED, "SD2.x UNet");
    expect_probe_error("sdxl.safetensors", t_sdxl, ERR_UNSUPPORTED, "label_emb");
    expect_probe_error("in5.safetensors", t_in5, ERR_UNSUPPORTED,
                       "SD1.5 UNet with 5 input channels");
    /* A LoRA file or random safetensors is not a checkpoint. */
    const char *pl = tmp_path("lora.safetensors");
    write_raw_st(pl,
                 "{\"lora_unet_input_blocks_1_1_proj_in.lora_up.weight\":{\"dtype\":\"F32\","
                 "\"shape\":[1],\"data_offsets\":[0,4]}}",
                 4);
    err_clear(&e);
    ok(model_ckpt_probe(pl, &c, &e) == ERR_UNSUPPORTED && strstr(e.msg, "LoRA"), "LoRA file: %s",
       e.msg);

    unlink(p32);
    unlink(p16);
    unlink(pbf);
    unlink(pv);
    unlink(pl);
}

/* ---- damaged files, one table row per architecture ------------------------------------------ */

/*
 * The damaged-file cases run over each architecture the generator writes (issue 13: every
 * SD1.5 edge case has its SDXL twin). A row names the tensors to damage; the checks and
 * the error kinds they expect are the same for every row.
 */
struct damage_case {
    const char *arch;                           /* file name prefix */
    void (*config)(struct model_config *c);     /* the clean file's config */
    const char *nan, *drop, *extra;             /* full names in the written file */
    const char *shape_victim;                   /* its last dimension is halved */
    const char *shape_got, *shape_want;         /* "[a,b]" as the error prints them */
    const char *family;                         /* the family name in messages */
};

static const struct damage_case damage_cases[] = {
    {"sd15", sd15_config_tiny, "model.diffusion_model.middle_block.1.proj_in.weight",
     "first_stage_model.decoder.up.2.block.1.conv1.bias",
     "model.diffusion_model.input_blocks.1.0.mystery.weight",
     "model.diffusion_model.output_blocks.3.0.emb_layers.1.weight", "[96,64]", "[96,128]",
     "SD1.5"},
    /* SDXL's own parts: the ADM projection, bigG in OpenCLIP naming (mapped to internal
     * names at load, reported in the file's naming). */
    {"sdxl", sdxl_config_tiny, "model.diffusion_model.label_emb.0.2.weight",
     "conditioner.embedders.1.model.transformer.resblocks.0.attn.out_proj.bias",
     "model.diffusion_model.label_emb.0.1.mystery.weight",
     "model.diffusion_model.label_emb.0.2.weight",
     "[128,64]", "[128,128]",
     "SDXL"},
};

static const struct damage_case *cur_case;
static const char *cur_nan, *cur_drop, *cur_extra;

static void t_case(struct ckpt_gen_opts *o)
{
    cur_case->config(&o->cfg);
    o->nan_tensor = cur_nan;
    o->drop_tensor = cur_drop;
    o->extra_tensor = cur_extra;
}
static void t_case_f16(struct ckpt_gen_opts *o)
{
    t_case(o);
    o->dtype = ST_DTYPE_F16;
}

/* Generate the current case's file with at most one kind of damage. */
static int gen_damaged(const char *kind, const char *nan, const char *drop, const char *extra,
                       const char **p)
{
    char name[64];
    snprintf(name, sizeof(name), "%s_%s.safetensors", cur_case->arch, kind);
    cur_nan = nan;
    cur_drop = drop;
    cur_extra = extra;
    int rc = gen(name, t_case, p);
    cur_nan = cur_drop = cur_extra = NULL;
    return rc;
}

static void expect_damage(const char *kind, const char *nan, const char *drop, const char *extra,
                          const char *needle)
{
    const char *p;
    struct err e = {0};
    struct model_config c;
    if (gen_damaged(kind, nan, drop, extra, &p) < 0) {
        ok(0, "generate %s %s", cur_case->arch, kind);
        return;
    }
    int rc = model_ckpt_probe(p, &c, &e);
    ok(rc == ERR_INVALID && strstr(e.msg, needle) && strstr(e.msg, kind), "%s %s: %s",
       cur_case->arch, kind, e.msg);
    unlink(p);
}

/* Rewrite src with `victim`'s last dimension halved (and half its bytes) into `out`. */
static void write_wrong_shape(struct st_file *src, const char *victim, const char *out,
                              struct err *e)
{
    struct st_writer *w = st_writer_new();
    for (size_t i = 0; i < src->n_tensors; i++) {
        const struct st_tensor *t = &src->tensors[i];
        int64_t shape[8];
        memcpy(shape, t->shape, sizeof(shape));
        if (strcmp(t->name, victim) == 0)
            shape[t->ndim - 1] /= 2;
        st_writer_add(w, t->name, t->dtype, t->ndim, shape);
    }
    st_writer_begin(w, out, e);
    for (size_t i = 0; i < src->n_tensors; i++) {
        const struct st_tensor *t = &src->tensors[i];
        uint64_t n = t->nbytes;
        if (strcmp(t->name, victim) == 0)
            n /= 2;
        st_writer_write(w, st_tensor_data(src, t), n, e);
    }
    st_writer_finish(w, e);
    st_writer_free(w);
}

static int component_tensors(const struct model_ckpt *ck)
{
    int n = 0;
    for (int c = 0; c < MODEL_COMPONENT_COUNT; c++)
        n += ck->tensors[c];
    return n;
}

static void test_damaged(const struct damage_case *dc)
{
    cur_case = dc;
    struct err e = {0};
    struct model_config c, want;
    dc->config(&want);

    /* NaN, missing and unexpected tensors: ERR_INVALID naming the file and the tensor. */
    char needle[256];
    snprintf(needle, sizeof(needle), "'%s' contains NaN", dc->nan);
    expect_damage("nan", dc->nan, NULL, NULL, needle);
    snprintf(needle, sizeof(needle), "'%s' is missing", dc->drop);
    expect_damage("drop", NULL, dc->drop, NULL, needle);
    snprintf(needle, sizeof(needle), "unexpected tensor '%s' (not part of the %s unet layout)",
             dc->extra, dc->family);
    expect_damage("extra", NULL, NULL, dc->extra, needle);

    /* An unknown tensor outside every component prefix is ignored: the file loads and
     * its components hold the clean file's tensors. */
    const char *pc, *pu;
    int clean = gen_damaged("clean", NULL, NULL, NULL, &pc);
    int unk = gen_damaged("unknown", NULL, NULL, "mystery_module.weight", &pu);
    if (clean == 0 && unk == 0) {
        const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
        struct model_ckpt a = {0}, b = {0};
        int ra = model_ckpt_load(pc, MODEL_LOAD_ALL, f32, &a, &e);
        int rb = model_ckpt_load(pu, MODEL_LOAD_ALL, f32, &b, &e);
        ok(ra == 0 && rb == 0 && memcmp(&b.cfg, &want, sizeof(want)) == 0 &&
               component_tensors(&a) == component_tensors(&b) && b.skipped == a.skipped + 1,
           "%s: unknown tensor outside the components ignored (%d tensors both, %d vs %d "
           "ignored %s)",
           dc->arch, component_tensors(&b), b.skipped, a.skipped, e.msg);
        model_ckpt_release(&a);
        model_ckpt_release(&b);
    } else {
        ok(0, "generate %s clean/unknown", dc->arch);
    }
    unlink(pu);

    /* Wrong shape: the clean file rewritten (f16, as the SD1.5 case always was) with one
     * tensor's last dimension halved. */
    const char *p16;
    char name[64];
    snprintf(name, sizeof(name), "%s_clean16.safetensors", dc->arch);
    if (gen(name, t_case_f16, &p16) == 0) {
        struct st_file *src = NULL;
        err_clear(&e);
        st_open(p16, &src, &e);
        snprintf(name, sizeof(name), "%s_wrongshape.safetensors", dc->arch);
        const char *wrong = tmp_path(name);
        if (src) {
            write_wrong_shape(src, dc->shape_victim, wrong, &e);
            st_close(src);
        }
        err_clear(&e);
        char want_shape[64];
        snprintf(want_shape, sizeof(want_shape), "expected %s", dc->shape_want);
        ok(model_ckpt_probe(wrong, &c, &e) == ERR_INVALID && strstr(e.msg, dc->shape_victim) &&
               strstr(e.msg, dc->shape_got) && strstr(e.msg, want_shape),
           "%s wrong shape: %s", dc->arch, e.msg);
        unlink(wrong);
        unlink(p16);
    } else {
        ok(0, "generate %s f16", dc->arch);
    }

    /* Truncation: the clean file cut in half. */
    if (clean == 0) {
        struct stat sb;
        stat(pc, &sb);
        ok(truncate(pc, sb.st_size / 2) == 0, "truncate");
        err_clear(&e);
        ok(model_ckpt_probe(pc, &c, &e) == ERR_INVALID &&
               strstr(e.msg, "outside the data section") && strstr(e.msg, "clean"),
           "%s truncated: %s", dc->arch, e.msg);
    }
    unlink(pc);
    cur_case = NULL;
}

/*
 * Another family's file where this one is expected: the probe says which family it is
 * (SD1.5's SDXL look-alike is refused outright; a refiner is an SDXL family of its own,
 * with the context and ADM widths that KSampler's "this SDXL refiner model needs 64-wide
 * conditioning" error compares; e2e_sdxl runs that node error).
 */
static void test_other_family(void)
{
    expect_probe_error("sd15_sdxlmark.safetensors", t_sdxl, ERR_UNSUPPORTED, "label_emb");
    const char *p;
    struct err e = {0};
    struct model_config c, base, rf;
    sdxl_config_tiny(&base);
    sdxl_refiner_config_tiny(&rf);
    if (gen("sdxl_refiner.safetensors", t_refiner, &p) < 0) {
        ok(0, "generate the refiner");
        return;
    }
    int rc = model_ckpt_probe(p, &c, &e);
    ok(rc == 0 && c.family == MODEL_FAMILY_SDXL_REFINER && c.family != base.family &&
           memcmp(&c, &rf, sizeof(c)) == 0 && c.unet.ctx_dim != base.unet.ctx_dim &&
           c.unet.adm_in != base.unet.adm_in,
       "a refiner file is the refiner family (%s), not the base: context %d vs %d, ADM %d vs %d",
       rc == 0 ? model_family_get(c.family)->name : e.msg, c.unet.ctx_dim, base.unet.ctx_dim,
       c.unet.adm_in, base.unet.adm_in);
    unlink(p);
}

/* ---- files changing on disk (issue 11) ------------------------------------------------- */

/* The tensor whose bytes lie last in the file: past any early truncation point. */
static const struct st_tensor *last_tensor(const struct st_file *f)
{
    const struct st_tensor *t = NULL;
    for (size_t i = 0; i < f->n_tensors; i++)
        if (!t || f->tensors[i].offset > t->offset)
            t = &f->tensors[i];
    return t;
}

static float first_f32(const struct st_file *f, const struct st_tensor *t)
{
    float x;
    memcpy(&x, st_tensor_data(f, t), sizeof(x));
    return x;
}

struct read_job {
    const struct st_file *f;
    const struct st_tensor *t;
    float x;
};

static void *read_on_thread(void *arg)
{
    struct read_job *j = arg;
    j->x = first_f32(j->f, j->t);
    return NULL;
}

/* Shrunk under an open mapping: reading past the new end gives zeros, not SIGBUS, and
 * st_check says so. Rewritten in place: st_check says so. Renamed over: still intact. */
static void test_changed_st(void)
{
    const char *p, *q;
    struct err e = {0};
    struct st_file *f = NULL;
    EXPECT_OK(gen("chg.safetensors", NULL, &p));
    EXPECT_OK(st_open(p, &f, &e));
    if (!f)
        return;
    const struct st_tensor *t = last_tensor(f);
    ok(first_f32(f, t) != 0.0f, "last tensor of the file is not zero before");
    EXPECT_OK(st_check(f, &e));
    ok(truncate(p, 4096) == 0, "truncate to 4 KiB");
    float x = first_f32(f, t); /* SIGBUS without the guard */
    ok(x == 0.0f, "a read past the new end gives zeros (%g)", x);
    err_clear(&e);
    ok(st_check(f, &e) == ERR_IO && strstr(e.msg, "shrank"), "st_check reports it: %s", e.msg);
    st_close(f);

    /* The same from a second thread, as a compute worker meets it: under ASan a thread
     * other than main takes the signal on the sanitizer's alternate stack, where an
     * instrumented handler once reported a heap-buffer-overflow and died (CI, stop 19). */
    EXPECT_OK(gen("chg.safetensors", NULL, &p));
    EXPECT_OK(st_open(p, &f, &e));
    if (!f)
        return;
    struct read_job job = {f, last_tensor(f), -1.0f};
    pthread_t th;
    ok(truncate(p, 4096) == 0, "truncate to 4 KiB again");
    ok(pthread_create(&th, NULL, read_on_thread, &job) == 0 && pthread_join(th, NULL) == 0,
       "read on a second thread");
    ok(job.x == 0.0f, "that thread reads zeros too (%g)", job.x);
    err_clear(&e);
    ok(st_check(f, &e) == ERR_IO, "and st_check reports it: %s", e.msg);
    st_close(f);

    /* In place, same size: only the stamp can tell. */
    EXPECT_OK(gen("chg.safetensors", NULL, &p));
    EXPECT_OK(st_open(p, &f, &e));
    FILE *fp = fopen(p, "r+b");
    ok(fp && fseek(fp, 100, SEEK_SET) == 0 && fputc(' ', fp) != EOF, "rewrite one byte in place");
    if (fp)
        fclose(fp);
    err_clear(&e);
    ok(f && st_check(f, &e) == ERR_IO && strstr(e.msg, "changed on disk"),
       "st_check reports an in-place rewrite: %s", e.msg);
    st_close(f);

    /* Renamed over: our inode and mapping are untouched. */
    EXPECT_OK(gen("chg.safetensors", NULL, &p));
    EXPECT_OK(st_open(p, &f, &e));
    float before = f ? first_f32(f, last_tensor(f)) : 0;
    EXPECT_OK(gen("chg-new.safetensors", NULL, &q));
    ok(rename(q, p) == 0, "rename a new file over it");
    err_clear(&e);
    ok(f && st_check(f, &e) == 0, "st_check passes after a rename over the file (%s)", e.msg);
    ok(f && first_f32(f, last_tensor(f)) == before, "the old bytes are still there");
    st_close(f);
    unlink(p);
}

#if defined(__x86_64__)
/* Read *p while rsp points at `top` inside a heap block, as oneDNN's JIT sgemm runs
 * (`mov rsp, workspace` for K > 2048). */
static float read_with_rsp_at(const float *p, uint8_t *top)
{
    float v;
    __asm__ volatile("mov %%rsp, %%rbx\n\t"
                     "mov %[top], %%rsp\n\t"
                     "movss (%[p]), %[v]\n\t"
                     "mov %%rbx, %%rsp\n\t"
                     : [v] "=x"(v)
                     : [p] "r"(p), [top] "r"(top)
                     : "rbx", "memory");
    return v;
}

#define HEAP_STACK (64 * 1024)

struct rsp_job {
    const float *p;
    int ensure;  /* call altstack_ensure() first */
    int has_alt; /* out: the thread had an alternate stack at the read */
    float x;
    int intact; /* out: the block below `top` still holds its pattern */
};

static void *rsp_read_on_thread(void *arg)
{
    struct rsp_job *j = arg;
    if (j->ensure)
        altstack_ensure();
    j->has_alt = altstack_present();
    uint8_t *blk = xmalloc(HEAP_STACK);
    memset(blk, 0xA5, HEAP_STACK);
    j->x = read_with_rsp_at(j->p, blk + HEAP_STACK - 4096);
    j->intact = 1;
    for (size_t i = 0; i < HEAP_STACK - 4096; i++)
        j->intact &= blk[i] == 0xA5;
    xfree(blk);
    return NULL;
}

/* One SIGBUS taken while rsp points into the heap, on a fresh thread. */
static void rsp_fault(struct rsp_job *job, const char *name)
{
    const char *p;
    struct err e = {0};
    struct st_file *f = NULL;
    EXPECT_OK(gen(name, NULL, &p));
    EXPECT_OK(st_open(p, &f, &e));
    if (!f)
        return;
    job->p = st_tensor_data(f, last_tensor(f));
    ok(truncate(p, 4096) == 0, "truncate %s", name);
    pthread_t th;
    ok(pthread_create(&th, NULL, rsp_read_on_thread, job) == 0 && pthread_join(th, NULL) == 0,
       "read on a thread whose rsp is in the heap");
    ok(job->x == 0.0f && st_check(f, &e) == ERR_IO, "the guard caught it (%g)", job->x);
    st_close(f);
    unlink(p);
}

/* The signal frame goes to the thread's alternate stack, not below rsp: without one,
 * the kernel wrote ~2.5 KiB of registers over heap memory there (the e2e crash of
 * "a checkpoint truncated in place mid-run", about 1 run in 10, in oneDNN's sgemm). */
static void test_fault_off_stack(void)
{
    struct rsp_job bare = {.ensure = 0}, safe = {.ensure = 1};
    rsp_fault(&bare, "rsp-bare.safetensors");
    if (bare.has_alt)
        ok(1, "# skip: threads have an alternate stack already (ASan's)");
    else
        ok(!bare.intact, "with no alternate stack the frame lands in the heap block (the "
                         "hazard this test guards against is real)");
    rsp_fault(&safe, "rsp-alt.safetensors");
    ok(safe.has_alt, "altstack_ensure gave the thread an alternate stack");
    ok(safe.intact, "with one, the heap block below rsp is untouched");
}
#endif

/* A loaded model whose weights are borrowed from the file fails its check once the file
 * shrinks (f32 as f32; f16 as f32, kept at its file dtype since issue 15); one whose
 * weights were all converted (MODEL_LOAD_CONVERT) no longer depends on the file. */
static void test_changed_ckpt(void)
{
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    const char *p32, *p16;
    struct err e = {0};
    struct model_ckpt a, b, c;
    EXPECT_OK(gen("chg32.safetensors", NULL, &p32));
    EXPECT_OK(gen("chg16.safetensors", t_f16, &p16));
    EXPECT_OK(model_ckpt_load(p32, MODEL_LOAD_ALL, f32, &a, &e));
    EXPECT_OK(model_ckpt_load(p16, MODEL_LOAD_ALL | MODEL_LOAD_CONVERT, f32, &b, &e));
    EXPECT_OK(model_ckpt_load(p16, MODEL_LOAD_ALL, f32, &c, &e));
    EXPECT_OK(patcher_model_check(a.model[MODEL_UNET], &e));
    ok(truncate(p32, 4096) == 0 && truncate(p16, 4096) == 0, "truncate both files");
    err_clear(&e);
    ok(patcher_model_check(a.model[MODEL_UNET], &e) == ERR_IO && strstr(e.msg, "changed on disk"),
       "f32 (borrowed): the check fails: %s", e.msg);
    err_clear(&e);
    ok(patcher_model_check(c.model[MODEL_UNET], &e) == ERR_IO && strstr(e.msg, "changed on disk"),
       "f16 kept as f16 for an f32 model (borrowed): the check fails: %s", e.msg);
    err_clear(&e);
    ok(patcher_model_check(b.model[MODEL_UNET], &e) == 0, "f16 (converted): unaffected (%s)",
       e.msg);
    model_ckpt_release(&a);
    model_ckpt_release(&b);
    model_ckpt_release(&c);
    /* Loading a file that is short of its header's promises fails cleanly. */
    err_clear(&e);
    ok(model_ckpt_load(p32, MODEL_LOAD_ALL, f32, &a, &e) < 0, "the truncated file fails to load");
    unlink(p32);
    unlink(p16);
}

int main(int argc, char **argv)
{
    fixtures = argc > 1 ? argv[1] : "tests/fixtures/models";
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof(tmpdir), "%s/test_models_io.XXXXXX", base);
    if (!mkdtemp(tmpdir))
        PANIC("mkdtemp: %s", strerror(errno));
    long live0 = alloc_live_count();
    test_conversions();
    test_roundtrip();
    test_bad_headers();
    test_layout();
    test_generator_and_detection();
    for (size_t i = 0; i < sizeof(damage_cases) / sizeof(damage_cases[0]); i++)
        test_damaged(&damage_cases[i]);
    test_other_family();
    test_changed_st();
#if defined(__x86_64__)
    test_fault_off_stack();
#endif
    test_changed_ckpt();
    EXPECT_EQ(alloc_live_count(), live0);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", tmpdir);
    return harness_done();
}
