/*
 * test_sd_hypernetwork — HypernetworkLoader (nodes/model/sd_attn_patch_nodes.c) on a tiny
 * SD1.5 checkpoint: the MODEL's epsilon with the patch (unet.h attn_kv, sd_backend.c) against
 * the unpatched MODEL's, on the CPU. The modules' numerics are test_models_hypernetwork's
 * (float64 reference); here, that the patch reaches every attention it should and no other:
 *   - strength 0, and a hypernetwork whose only width the UNet has no attention of, give
 *     the unpatched epsilon bit for bit (the copies of the attention inputs change nothing);
 *   - a hypernetwork for the UNet's widths (32, 64, 96: self-attentions, and the 64-wide
 *     context) changes it, more with strength 2 than 1; stacking two applies both; the
 *     input MODEL is left unpatched (a clone);
 *   - the same patch written into the attention inputs by hand (hypernetwork_apply on
 *     every k/v input of widths 32/64/96 through a unet_eval_patched hook of this test)
 *     gives the node's epsilon bit for bit;
 *   - bad input: a file that is not a hypernetwork is a node error; a .safetensors file
 *     patches nothing (ComfyUI finds no modules in one), logged.
 *
 * usage: test_sd_hypernetwork FIXTURE_DIR
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "harness.h"
#include "hypernetwork.h"
#include "memmgr.h"
#include "node_registry.h"
#include "node_run.h"
#include "sd_backend.h"
#include "sd_extra_nodes.h"
#include "sd_nodes.h"
#include "tensor.h"
#include "unet.h"

static struct node_env env;

static struct value *run1(const struct node_class *cls, const char *const *names,
                          struct value **vals, int n, char *msg, size_t msg_size)
{
    struct value *in[8] = {0}, *outs[4] = {0};
    for (int i = 0; i < n; i++)
        in[node_class_input_index(cls, names[i])] = vals[i];
    struct node_ctx c;
    node_ctx_init(&c, cls, "1", &env, in, outs);
    int rc = cls->run(&c);
    snprintf(msg, msg_size, "%s: %s", c.exc_type, c.exc_message.ptr ? c.exc_message.ptr : "");
    node_ctx_release(&c);
    for (int i = 0; i < 8; i++)
        value_unref(in[i]);
    for (int i = 1; i < 4; i++)
        value_unref(outs[i]);
    if (rc < 0) {
        value_unref(outs[0]);
        return NULL;
    }
    return outs[0];
}

static struct value *patch(struct value *model, const char *file, double strength, char *msg,
                           size_t n)
{
    const char *names[] = {"model", "hypernetwork_name", "strength"};
    struct value *v[] = {value_ref(model), value_new_string(file), value_new_float(strength)};
    return run1(&sd_hypernetwork_loader, names, v, 3, msg, n);
}

#define B 2
#define H 8
#define W 8
#define TOK 77
#define CTX 64
static float x_in[B * 4 * H * W], ctx[B * TOK * CTX], ts[B] = {500, 120};

/* The MODEL's epsilon for x_in, ts, ctx into out (B*4*H*W); 0 or an error. */
static int eps_of(const struct value *mv, float *out)
{
    const struct sd_model *m = sd_model_of(mv);
    struct err e = {0};
    int rc = m->ops->prepare(m->impl, env.mm, B, H, W, TOK, &e);
    if (rc == 0)
        rc = m->ops->apply_eps(m->impl, x_in, B, H, W, ts, ctx, TOK, CTX, out, &e);
    if (m->ops->finish)
        m->ops->finish(m->impl, env.mm);
    if (rc < 0)
        printf("# eps: %s\n", e.msg);
    return rc;
}

static double max_diff(const float *a, const float *b)
{
    double d = 0;
    for (int i = 0; i < B * 4 * H * W; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* The hand-made patch: every k/v input through hypernetwork_apply, the node's order. */
static const struct hypernetwork *g_hn;
static int hand_kv(void *user, int self_attn, struct tensor *k, struct tensor *v, struct err *e)
{
    (void)user;
    (void)self_attn;
    int64_t rows = k->shape[0] * k->shape[1], w = k->shape[2], n = rows * w;
    float *buf = xmalloc((size_t)n * sizeof(float));
    int rc = 0;
    for (int which = 0; which < 2 && rc == 0; which++) {
        struct tensor *t = which ? v : k;
        if ((rc = tensor_read_f32(t, buf, n, e)) == 0 &&
            hypernetwork_apply(g_hn, (int)w, which, 1.0f, buf, rows, buf))
            rc = tensor_write_f32(t, buf, n, e);
    }
    xfree(buf);
    return rc;
}

int main(int argc, char **argv)
{
    long live0 = alloc_live_count();
    if (argc < 2) {
        printf("usage: %s FIXTURE_DIR\n", argv[0]);
        return 2;
    }
    char root[] = "/tmp/test_sd_hypernetwork.XXXXXX", path[512], src[512], msg[512];
    if (!mkdtemp(root))
        PANIC("mkdtemp");
    snprintf(path, sizeof path, "%s/checkpoints", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/hypernetworks", root);
    mkdir(path, 0755);
    const char *files[] = {"tiny_sd15.pt", "other_width.pt"};
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/%s", argv[1], files[i]);
        snprintf(path, sizeof path, "%s/hypernetworks/%s", root, files[i]);
        if (symlink(src, path) != 0)
            PANIC("symlink %s", path);
    }
    struct ckpt_gen_opts o;
    struct err e = {0};
    ckpt_gen_opts_default(&o); /* tiny SD1.5: attention widths 32, 64, 96; context 64 */
    snprintf(path, sizeof path, "%s/checkpoints/tiny.safetensors", root);
    EXPECT_OK(ckpt_gen_write(&o, path, &e));
    /* Not hypernetworks: a safetensors file, and a text file named .pt. */
    snprintf(src, sizeof src, "%s/hypernetworks/flat.safetensors", root);
    ok(symlink(path, src) == 0, "a .safetensors in hypernetworks");
    snprintf(path, sizeof path, "%s/hypernetworks/broken.pt", root);
    FILE *fp = fopen(path, "w");
    fputs("not a torch file", fp);
    fclose(fp);

    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    if (mm_new(&mc, &mm, &e) < 0) {
        ok(0, "mm_new: %s", e.msg);
        return harness_done();
    }
    env.models_dir = root;
    env.mm = mm;
    uint64_t s = 7;
    for (size_t i = 0; i < sizeof x_in / sizeof x_in[0]; i++)
        x_in[i] = (float)(((s = s * 6364136223846793005ULL + 1442695040888963407ULL) >> 40) /
                          (double)(1 << 24) * 2 - 1);
    for (size_t i = 0; i < sizeof ctx / sizeof ctx[0]; i++)
        ctx[i] = (float)(((s = s * 6364136223846793005ULL + 1442695040888963407ULL) >> 40) /
                         (double)(1 << 24) * 2 - 1);

    const char *cn[] = {"ckpt_name"};
    struct value *cv[] = {value_new_string("tiny.safetensors")};
    struct value *A = run1(&sd_checkpoint_loader_simple, cn, cv, 1, msg, sizeof msg);
    ok(A != NULL, "the tiny checkpoint loads (%s)", A ? "ok" : msg);
    if (!A)
        goto done;
    static float eA[B * 4 * H * W], eP[B * 4 * H * W], eT[B * 4 * H * W], eX[B * 4 * H * W];
    ok(eps_of(A, eA) == 0, "unpatched epsilon");

    struct value *Z = patch(A, "tiny_sd15.pt", 0.0, msg, sizeof msg);
    ok(Z && eps_of(Z, eX) == 0 && max_diff(eA, eX) == 0.0,
       "strength 0: the unpatched epsilon bit for bit (%s)", Z ? "ok" : msg);
    struct value *O = patch(A, "other_width.pt", 1.0, msg, sizeof msg);
    ok(O && eps_of(O, eX) == 0 && max_diff(eA, eX) == 0.0,
       "a hypernetwork of width 24 only: the unpatched epsilon bit for bit (%s)", O ? "ok" : msg);
    struct value *P = patch(A, "tiny_sd15.pt", 1.0, msg, sizeof msg);
    double d1 = P && eps_of(P, eP) == 0 ? max_diff(eA, eP) : -1;
    struct value *T = patch(A, "tiny_sd15.pt", 2.0, msg, sizeof msg);
    double d2 = T && eps_of(T, eT) == 0 ? max_diff(eA, eT) : -1;
    ok(d1 > 1e-4 && d2 > d1, "strength 1 and 2 change epsilon (max |diff| %.3g, %.3g)", d1, d2);
    ok(eps_of(A, eX) == 0 && max_diff(eA, eX) == 0.0, "the input MODEL stays unpatched");
    struct value *PP = P ? patch(P, "tiny_sd15.pt", 1.0, msg, sizeof msg) : NULL;
    ok(PP && eps_of(PP, eX) == 0 && max_diff(eP, eX) > 1e-5, "stacked: two patches apply "
       "(max |diff| from one %.3g)", PP ? max_diff(eP, eX) : -1.0);

    /* The same patch by hand through unet_eval_patched's hook. */
    {
        struct hypernetwork *h = NULL;
        snprintf(src, sizeof src, "%s/tiny_sd15.pt", argv[1]);
        int rc = hypernetwork_load(src, &h, &e);
        struct model_config cfg;
        struct patcher *up = sd_model_unet_patcher(sd_model_of(A), &cfg);
        struct mm_request req = {.models = {up}, .n_models = 1};
        struct mm_report rep;
        struct tensor *tx = NULL, *tc = NULL, *te = NULL;
        if (rc == 0)
            rc = mm_load_models(mm, &req, &rep, &e);
        struct dev *d = patcher_device(up);
        /* apply_eps scales nothing itself: x_in is the UNet's input as given. */
        if (rc == 0) {
            rc = tensor_new(d, TENSOR_F32, 4, (const int64_t[]){B, 4, H, W}, &tx, &e);
            rc = rc ? rc : tensor_new(d, TENSOR_F32, 3, (const int64_t[]){B, TOK, CTX}, &tc, &e);
            rc = rc ? rc : tensor_new(d, TENSOR_F32, 4, (const int64_t[]){B, 4, H, W}, &te, &e);
            rc = rc ? rc : tensor_write_f32(tx, x_in, B * 4 * H * W, &e);
            rc = rc ? rc : tensor_write_f32(tc, ctx, B * TOK * CTX, &e);
            g_hn = h;
            struct unet_patches hp = {.attn_kv = hand_kv};
            rc = rc ? rc : unet_eval_patched(up, &cfg.unet, tx, ts, tc, NULL, NULL, &hp, te, &e);
            rc = rc ? rc : tensor_read_f32(te, eX, B * 4 * H * W, &e);
            mm_node_end(mm, &rep);
        }
        ok(rc == 0 && max_diff(eP, eX) == 0.0,
           "the hand-made patch through the UNet hook = the node's epsilon bit for bit (%s)",
           rc ? e.msg : "ok");
        tensor_free(tx);
        tensor_free(tc);
        tensor_free(te);
        hypernetwork_free(h);
    }

    struct value *F = patch(A, "flat.safetensors", 1.0, msg, sizeof msg);
    ok(F && eps_of(F, eX) == 0 && max_diff(eA, eX) == 0.0,
       "a .safetensors hypernetwork patches nothing, as in ComfyUI (%s)", F ? "ok" : msg);
    struct value *X = patch(A, "broken.pt", 1.0, msg, sizeof msg);
    ok(!X && strstr(msg, "could not load hypernetwork 'broken.pt'"), "not a torch file: %s", msg);
    struct value *N = patch(A, "none.pt", 1.0, msg, sizeof msg);
    ok(!N && strstr(msg, "FileNotFoundError"), "%s", msg);
    value_unref(Z);
    value_unref(O);
    value_unref(P);
    value_unref(T);
    value_unref(PP);
    value_unref(F);
    value_unref(A);
done:
    mm_unload_all(mm);
    mm_free(mm);
    snprintf(path, sizeof path, "rm -rf '%s'", root);
    if (system(path) != 0)
        printf("# could not remove %s\n", root);
    tensor_shutdown();
    ok(alloc_live_count() == live0, "no allocation left live (%ld)", alloc_live_count() - live0);
    return harness_done();
}
