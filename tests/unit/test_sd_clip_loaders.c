/*
 * test_sd_clip_loaders — CLIPLoader and DualCLIPLoader (nodes/model/sd_clip_loader_nodes.c,
 * models/checkpoint_text.c) on tiny random-weight text encoders from ckpt_gen, on the CPU:
 *   - every accepted naming (Hugging Face text_model.*, bare OpenCLIP, a checkpoint's own
 *     prefixed names, a whole checkpoint) of SD1.5's CLIP-L, SD2's ViT-H and SDXL's CLIP-L +
 *     bigG, written with the same seed as a checkpoint, gives CLIPTextEncode embeddings and
 *     pooled vectors bit-identical to that checkpoint's CLIP (CheckpointLoaderSimple), in
 *     both folders (text_encoders, clip) and both file orders for DualCLIPLoader; the
 *     Hugging Face bigG has q/k/v split out of in_proj and the projection transposed;
 *   - a single bigG is the SDXL refiner's CLIP, as ComfyUI's SDXLRefinerClipModel;
 *   - CLIPSave's SDXL files (_clip_l, _clip_g) load back through DualCLIPLoader to the same
 *     embeddings;
 *   - bad input: a VAE, a file not there, two CLIP-L files, a type of another family, a
 *     file with a missing tensor: node errors that say so.
 */
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
#include "sd_backend.h"
#include "sd_nodes.h"
#include "tensor.h"

static struct node_env env;
static char root[64];

/* Run `cls` with named inputs (references taken over); out[0] gets output 0 (or NULL). */
static int run_node(const struct node_class *cls, const char *const *names, struct value **vals,
                    int n, struct value **out, char *msg, size_t msg_size)
{
    struct value *in[8] = {0}, *outs[4] = {0};
    for (int i = 0; i < n; i++) {
        int k = node_class_input_index(cls, names[i]);
        ASSERT(k >= 0 && k < 8);
        in[k] = vals[i];
    }
    struct node_ctx c;
    node_ctx_init(&c, cls, "1", &env, in, outs);
    int rc = cls->run(&c);
    snprintf(msg, msg_size, "%s: %s", c.exc_type, c.exc_message.ptr ? c.exc_message.ptr : "");
    node_ctx_release(&c);
    for (int i = 0; i < 8; i++)
        value_unref(in[i]);
    *out = outs[0];
    for (int i = 1; i < 4; i++)
        value_unref(outs[i]);
    return rc;
}

/* Write a ckpt_gen file into models/<dir>/<name>. */
static void gen(const char *dir, const char *name, void (*config)(struct model_config *),
                uint64_t seed, int text_file, int slot, const char *drop, unsigned flags)
{
    struct ckpt_gen_opts o;
    struct err e = {0};
    char path[256];
    ckpt_gen_opts_default(&o);
    config(&o.cfg);
    o.seed = seed;
    o.text_file = text_file;
    o.text_slot = slot;
    o.drop_tensor = drop;
    o.flags = flags;
    snprintf(path, sizeof path, "%s/%s/%s", root, dir, name);
    if (ckpt_gen_write(&o, path, &e) < 0)
        PANIC("gen %s: %s", path, e.msg);
}

static struct value *load_clip(const char *file, const char *type, char *msg, size_t n)
{
    const char *names[] = {"clip_name", "type"};
    struct value *v[] = {value_new_string(file), value_new_string(type)}, *out = NULL;
    run_node(&sd_clip_loader, names, v, 2, &out, msg, n);
    return out;
}

static struct value *load_dual(const char *a, const char *b, const char *type, char *msg,
                               size_t n)
{
    const char *names[] = {"clip_name1", "clip_name2", "type"};
    struct value *v[] = {value_new_string(a), value_new_string(b), value_new_string(type)};
    struct value *out = NULL;
    run_node(&sd_dual_clip_loader, names, v, 3, &out, msg, n);
    return out;
}

static struct value *load_ckpt_clip(const char *file, char *msg, size_t n)
{
    struct value *outs[4] = {0}, *in[1] = {value_new_string(file)};
    struct node_ctx c;
    node_ctx_init(&c, &sd_checkpoint_loader_simple, "1", &env, in, outs);
    int rc = sd_checkpoint_loader_simple.run(&c);
    snprintf(msg, n, "%s: %s", c.exc_type, c.exc_message.ptr ? c.exc_message.ptr : "");
    node_ctx_release(&c);
    value_unref(in[0]);
    value_unref(outs[0]);
    value_unref(outs[2]);
    if (rc < 0) {
        value_unref(outs[1]);
        return NULL;
    }
    return outs[1];
}

static const char *const prompt = "a (red:1.3) cat, [sitting] on a mat";

/* CLIPTextEncode with `clip` (borrowed); NULL on failure. Caller frees (sd_cond_free via
 * the value). */
static struct value *encode(struct value *clip, char *msg, size_t n)
{
    const char *names[] = {"text", "clip"};
    struct value *v[] = {value_new_string(prompt), value_ref(clip)}, *out = NULL;
    run_node(&sd_clip_text_encode, names, v, 2, &out, msg, n);
    return out;
}

/* The two conditionings hold the same bytes (embeddings and pooled vector). */
static int same_cond(const struct value *a, const struct value *b, char *why, size_t n)
{
    const struct sd_cond *x = sd_cond_of(a), *y = sd_cond_of(b);
    if (!x || !y) {
        snprintf(why, n, "no conditioning");
        return 0;
    }
    const struct sd_cond_entry *p = &x->entries[0], *q = &y->entries[0];
    if (p->tokens != q->tokens || p->dim != q->dim || p->pooled_dim != q->pooled_dim) {
        snprintf(why, n, "shapes [%d,%d]+%d vs [%d,%d]+%d", p->tokens, p->dim, p->pooled_dim,
                 q->tokens, q->dim, q->pooled_dim);
        return 0;
    }
    size_t nc = (size_t)p->batch * p->tokens * p->dim, np = (size_t)p->batch * p->pooled_dim;
    if (memcmp(p->cond, q->cond, nc * sizeof(float)) != 0 ||
        (np && memcmp(p->pooled, q->pooled, np * sizeof(float)) != 0)) {
        snprintf(why, n, "values differ");
        return 0;
    }
    snprintf(why, n, "[%d, %d], pooled %d", p->tokens, p->dim, p->pooled_dim);
    return 1;
}

/* The CLIP `got` (taken) encodes as the reference conditioning `want`. */
static void check_same(struct value *got, const struct value *want, const char *what,
                       const char *load_msg)
{
    char msg[512], why[128] = "";
    struct value *c = got ? encode(got, msg, sizeof msg) : NULL;
    ok(c && same_cond(c, want, why, sizeof why), "%s: embeddings bit-identical to the "
       "checkpoint's (%s)", what, got ? (c ? why : msg) : load_msg);
    value_unref(c);
    value_unref(got);
}

int main(void)
{
    long live0 = alloc_live_count();
    char msg[512], path[320];
    snprintf(root, sizeof root, "/tmp/test_sd_clip_loaders.XXXXXX");
    if (!mkdtemp(root))
        PANIC("mkdtemp");
    const char *dirs[] = {"checkpoints", "text_encoders", "clip", "vae", "output"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
        mkdir(path, 0755);
    }
    /* Checkpoints (seed 3) and the same encoders alone, in every naming. */
    gen("checkpoints", "sd15.safetensors", sd15_config_tiny, 3, CKPT_GEN_TEXT_NONE, 0, NULL, 0);
    gen("checkpoints", "sd2.safetensors", sd2_config_tiny, 3, CKPT_GEN_TEXT_NONE, 0, NULL, 0);
    gen("checkpoints", "xl.safetensors", sdxl_config_tiny, 3, CKPT_GEN_TEXT_NONE, 0, NULL, 0);
    gen("checkpoints", "ref.safetensors", sdxl_refiner_config_tiny, 3, CKPT_GEN_TEXT_NONE, 0,
        NULL, 0);
    gen("text_encoders", "l_hf.safetensors", sd15_config_tiny, 3, CKPT_GEN_TEXT_HF, 0, NULL, 0);
    gen("clip", "l_prefixed.safetensors", sd15_config_tiny, 3, CKPT_GEN_TEXT_PREFIXED, 0, NULL, 0);
    gen("text_encoders", "h_openclip.safetensors", sd2_config_tiny, 3, CKPT_GEN_TEXT_OPENCLIP, 0, NULL, 0);
    gen("text_encoders", "h_hf.safetensors", sd2_config_tiny, 3, CKPT_GEN_TEXT_HF, 0, NULL, 0);
    gen("text_encoders", "xl_l.safetensors", sdxl_config_tiny, 3, CKPT_GEN_TEXT_HF, 0, NULL, 0);
    gen("text_encoders", "xl_g_openclip.safetensors", sdxl_config_tiny, 3,
        CKPT_GEN_TEXT_OPENCLIP, 1, NULL, 0);
    gen("text_encoders", "xl_g_hf.safetensors", sdxl_config_tiny, 3, CKPT_GEN_TEXT_HF, 1, NULL, 0);
    gen("text_encoders", "xl_g_prefixed.safetensors", sdxl_config_tiny, 3,
        CKPT_GEN_TEXT_PREFIXED, 1, NULL, 0);
    gen("text_encoders", "ref_g.safetensors", sdxl_refiner_config_tiny, 3, CKPT_GEN_TEXT_HF, 0,
        NULL, 0);
    gen("text_encoders", "l_broken.safetensors", sd15_config_tiny, 3, CKPT_GEN_TEXT_HF, 0,
        "text_model.encoder.layers.1.mlp.fc2.weight", 0);
    gen("vae", "vae.safetensors", sd15_config_tiny, 3, CKPT_GEN_TEXT_NONE, 0, NULL, CKPT_GEN_VAE_ONLY);

    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    struct err e = {0};
    if (mm_new(&mc, &mm, &e) < 0) {
        ok(0, "mm_new: %s", e.msg);
        return harness_done();
    }
    env.models_dir = root;
    char out_dir[96];
    snprintf(out_dir, sizeof out_dir, "%s/output", root);
    env.output_dir = out_dir;
    env.mm = mm;

    /* References: the checkpoints' CLIPs. */
    const char *ck_files[] = {"sd15.safetensors", "sd2.safetensors", "xl.safetensors",
                              "ref.safetensors"};
    struct value *ref[4] = {0};
    for (int i = 0; i < 4; i++) {
        struct value *cl = load_ckpt_clip(ck_files[i], msg, sizeof msg);
        ref[i] = cl ? encode(cl, msg, sizeof msg) : NULL;
        ok(ref[i] != NULL, "%s: checkpoint CLIP encodes (%s)", ck_files[i], ref[i] ? "ok" : msg);
        value_unref(cl);
    }
    if (!ref[0] || !ref[1] || !ref[2] || !ref[3])
        goto done;

    /* ---- CLIPLoader ---- */
    check_same(load_clip("l_hf.safetensors", "stable_diffusion", msg, sizeof msg), ref[0],
               "CLIP-L, text_model.* names", msg);
    check_same(load_clip("l_prefixed.safetensors", "stable_diffusion", msg, sizeof msg), ref[0],
               "CLIP-L, cond_stage_model.* names in models/clip", msg);
    /* A whole checkpoint in text_encoders: its text encoder (UNet and VAE skipped). */
    snprintf(path, sizeof path, "%s/checkpoints/sd15.safetensors", root);
    char link_path[320];
    snprintf(link_path, sizeof link_path, "%s/text_encoders/sd15_whole.safetensors", root);
    ok(symlink(path, link_path) == 0, "symlink a whole checkpoint into text_encoders");
    check_same(load_clip("sd15_whole.safetensors", "stable_diffusion", msg, sizeof msg), ref[0],
               "CLIP-L of a whole SD1.5 checkpoint", msg);
    check_same(load_clip("h_openclip.safetensors", "stable_diffusion", msg, sizeof msg), ref[1],
               "ViT-H (SD2), bare OpenCLIP names", msg);
    check_same(load_clip("h_hf.safetensors", "stable_diffusion", msg, sizeof msg), ref[1],
               "ViT-H (SD2), Hugging Face names (q/k/v split, projection transposed)", msg);
    {
        struct value *g = load_clip("ref_g.safetensors", "stable_diffusion", msg, sizeof msg);
        const struct sd_clip *cl = sd_clip_of(g);
        ok(cl && cl->cfg.family == MODEL_FAMILY_SDXL_REFINER && !cl->p2,
           "a single bigG is the SDXL refiner's CLIP (%s)", g ? "ok" : msg);
        check_same(g, ref[3], "bigG (refiner), Hugging Face names", msg);
    }

    /* ---- DualCLIPLoader ---- */
    const char *gs[] = {"xl_g_openclip.safetensors", "xl_g_hf.safetensors",
                        "xl_g_prefixed.safetensors"};
    for (int i = 0; i < 3; i++) {
        char what[128];
        snprintf(what, sizeof what, "SDXL CLIP-L + %s", gs[i]);
        check_same(load_dual("xl_l.safetensors", gs[i], "sdxl", msg, sizeof msg), ref[2], what,
                   msg);
    }
    check_same(load_dual("xl_g_hf.safetensors", "xl_l.safetensors", "sdxl", msg, sizeof msg),
               ref[2], "SDXL, bigG given first", msg);

    /* CLIPSave of the SDXL CLIP: its _clip_l / _clip_g files load back. */
    {
        struct value *cl = load_ckpt_clip("xl.safetensors", msg, sizeof msg), *none = NULL;
        const char *names[] = {"clip", "filename_prefix"};
        struct value *v[] = {cl, value_new_string("saved")};
        int rc = run_node(&sd_clip_save, names, v, 2, &none, msg, sizeof msg);
        value_unref(none);
        char a[320], b[320];
        snprintf(a, sizeof a, "%s/output/saved_clip_l_00001_.safetensors", root);
        snprintf(b, sizeof b, "%s/output/saved_clip_g_00001_.safetensors", root);
        snprintf(path, sizeof path, "%s/text_encoders/saved_l.safetensors", root);
        snprintf(link_path, sizeof link_path, "%s/text_encoders/saved_g.safetensors", root);
        ok(rc == 0 && symlink(a, path) == 0 && symlink(b, link_path) == 0,
           "CLIPSave writes _clip_l and _clip_g (%s)", rc ? msg : "ok");
        check_same(load_dual("saved_l.safetensors", "saved_g.safetensors", "sdxl", msg, sizeof msg),
                   ref[2], "SDXL from CLIPSave's files", msg);
    }

    /* ---- bad input ---- */
    struct value *bad;
    snprintf(path, sizeof path, "%s/vae/vae.safetensors", root);
    snprintf(link_path, sizeof link_path, "%s/text_encoders/vae.safetensors", root);
    ok(symlink(path, link_path) == 0, "symlink the VAE into text_encoders");
    bad = load_clip("vae.safetensors", "stable_diffusion", msg, sizeof msg);
    ok(!bad && strstr(msg, "not a CLIP text encoder") && strstr(msg, "VAE"), "a VAE: %s", msg);
    value_unref(bad);
    bad = load_clip("none.safetensors", "stable_diffusion", msg, sizeof msg);
    ok(!bad && strstr(msg, "FileNotFoundError") && strstr(msg, "none.safetensors"), "%s", msg);
    value_unref(bad);
    bad = load_clip("l_hf.safetensors", "sd3", msg, sizeof msg);
    ok(!bad && strstr(msg, "'sd3' is not supported"), "type sd3: %s", msg);
    value_unref(bad);
    bad = load_dual("xl_l.safetensors", "l_hf.safetensors", "sdxl", msg, sizeof msg);
    ok(!bad && strstr(msg, "CLIP-L and an OpenCLIP ViT-bigG") && strstr(msg, "is CLIP-L"),
       "two CLIP-L files: %s", msg);
    value_unref(bad);
    bad = load_dual("xl_l.safetensors", "xl_g_hf.safetensors", "flux", msg, sizeof msg);
    ok(!bad && strstr(msg, "'flux' is not supported"), "type flux: %s", msg);
    value_unref(bad);
    bad = load_clip("l_broken.safetensors", "stable_diffusion", msg, sizeof msg);
    ok(!bad && strstr(msg, "layers.1.mlp.fc2.weight") && strstr(msg, "missing"),
       "a missing tensor: %s", msg);
    value_unref(bad);

done:
    for (int i = 0; i < 4; i++)
        value_unref(ref[i]);
    mm_unload_all(mm);
    mm_free(mm);
    snprintf(path, sizeof path, "rm -rf '%s'", root);
    if (system(path) != 0)
        printf("# could not remove %s\n", root);
    tensor_shutdown();
    ok(alloc_live_count() == live0, "no allocation left live (%ld)", alloc_live_count() - live0);
    return harness_done();
}
