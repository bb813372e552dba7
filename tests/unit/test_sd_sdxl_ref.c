/*
 * test_sd_sdxl_ref — the SDXL conditioning builders of nodes/sd_backend (CLIPTextEncode,
 * CLIPTextEncodeSDXL) on the tiny generated SDXL against the float64 reference
 * (tools/reference_sdxl.py, tests/fixtures/models/sdxl_tiny_expected.txt): the cond is
 * CLIP-L's and bigG's features side by side, CLIP-L first (sdxl.md §4.5), with bigG's
 * pooled output; CLIPTextEncodeSDXL with text_l longer than text_g evens bigG's list out
 * with empty-prompt chunks padded with 0 (§4.7) and weights text_g for bigG alone.
 * test_models_sdxl_ref checks the encoders themselves. Argument: fixtures dir.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "buf.h"
#include "checkpoint.h"
#include "ckpt_gen.h"
#include "family.h"
#include "harness.h"
#include "memmgr.h"
#include "ref_fixture.h"
#include "sd_backend.h"

/* Must equal tools/reference_sdxl.py's SDXL_TEXT_G / SDXL_TEXT_L. */
#define TEXT_G "a (glass:1.3) bottle on a table"
static void text_l(struct buf *b)
{
    buf_adds(b, "a ");
    for (int i = 0; i < 90; i++)
        buf_adds(b, "red ");
    buf_adds(b, "bottle");
}

static void compare_entry(const char *name, const struct sd_cond *c, int tokens)
{
    char pn[64];
    if (!c || c->n != 1) {
        ok(0, "%s: one entry", name);
        return;
    }
    const struct sd_cond_entry *en = &c->entries[0];
    int64_t cs[3] = {en->batch, en->tokens, en->dim}, ps[1] = {en->pooled_dim};
    EXPECT_EQ(en->tokens, tokens);
    snprintf(pn, sizeof(pn), "%s.cond", name);
    ref_compare(pn, en->cond, 3, cs, 1e-5);
    snprintf(pn, sizeof(pn), "%s.pooled", name);
    if (en->pooled)
        ref_compare(pn, en->pooled, 1, ps, 1e-5);
    else
        ok(0, "%s: no pooled output", name);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_sd_sdxl_ref FIXTURE_DIR\n");
        return 2;
    }
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    ref_fixture_load(argv[1], "sdxl_tiny_expected.txt");
    char dir[] = "/tmp/test_sd_sdxl_ref.XXXXXX", path[96];
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    snprintf(path, sizeof(path), "%s/tiny.safetensors", dir);
    struct err e = {0};
    struct ckpt_gen_opts o;
    struct model_ckpt ck;
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    ckpt_gen_opts_default(&o);
    sdxl_config_tiny(&o.cfg);
    EXPECT_OK(ckpt_gen_write(&o, path, &e));
    if (model_ckpt_load(path, MODEL_LOAD_ALL, f32, &ck, &e) < 0) {
        ok(0, "load the tiny SDXL: %s", e.msg);
        return harness_done();
    }
    struct mm_config mc;
    struct mm *mm = NULL;
    struct sd_clip *clip = NULL;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    EXPECT_OK(mm_new(&mc, &mm, &e));
    EXPECT_OK(sd_clip_new(patcher_new(ck.model[MODEL_CLIP]), &ck.cfg, &clip, &e));
    sd_clip_set_second(clip, patcher_new(ck.model[MODEL_CLIP2]));

    struct sd_cond *c = NULL;
    int rc = sd_clip_encode_text(clip, mm, "a photo of a cat", &c, &e);
    ok(rc == 0, "CLIPTextEncode on the SDXL CLIP (%s)", rc ? e.msg : "ok");
    compare_entry("xl0", c, 77);
    sd_cond_free(c);

    struct buf l;
    buf_init(&l);
    text_l(&l);
    struct adm_sizes s = {
        .width = 1024, .height = 1024, .target_width = 1024, .target_height = 1024};
    c = NULL;
    rc = sd_clip_encode_sdxl(clip, mm, TEXT_G, l.ptr, &s, &c, &e);
    ok(rc == 0, "CLIPTextEncodeSDXL, text_l longer than text_g (%s)", rc ? e.msg : "ok");
    compare_entry("xlsdxl", c, 154);
    sd_cond_free(c);
    buf_release(&l);

    sd_clip_free(clip);
    mm_unload(mm, ck.model[MODEL_CLIP]);
    mm_unload(mm, ck.model[MODEL_CLIP2]);
    mm_free(mm);
    model_ckpt_release(&ck);
    unlink(path);
    rmdir(dir);
    ref_fixture_free();
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
