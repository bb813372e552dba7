/*
 * test_memory_pages — the weight pages a process keeps mapped (issue 15: peak RSS).
 *
 * Checked, reading this process's page table (/proc/self/pagemap, util/pages.h):
 *   - pages_drop / pages_mapped_bytes on a file mapping: exact page counts, contents
 *     unchanged after the pages come back;
 *   - loading a tiny f16 checkpoint maps none of its weights (validation reads through
 *     the descriptor);
 *   - on the cpu device, CLIP's pages are mapped while it encodes and unmapped once a
 *     node loads the UNet alone; the UNet's once a node loads the VAE alone; the CLIP
 *     embedding and the UNet eps computed again from the pages mapped back are
 *     bit-identical to the first ones;
 *   - mm_config.keep_weight_pages keeps them mapped, with the same outputs;
 *   - weights converted at load (heap copies, MODEL_LOAD_CONVERT) are never dropped:
 *     their eps equals the borrowed model's after the same sequence;
 *   - on the simulated device (own copies), the UNet's pages are unmapped right after
 *     the upload, and its eps equals the cpu device's.
 * Only pages wholly inside a model's weights are counted (model_mapped says why).
 * Arguments: tokenizer dir.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc.h"
#include "checkpoint.h"
#include "ckpt_gen.h"
#include "harness.h"
#include "memmgr.h"
#include "pages.h"
#include "ref_fixture.h"
#include "text_encoder.h"
#include "unet.h"

#define PAGE 4096u

static struct clip_tokenizer *tok;

/* ---- util/pages on a plain file mapping ---------------------------------------------- */

static void test_pages_util(const char *dir)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/pages.bin", dir);
    enum { NP = 64 };
    unsigned char *src = xmalloc(NP * PAGE);
    for (size_t i = 0; i < NP * PAGE; i++)
        src[i] = (unsigned char)(i * 131u + 7u);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ok(fd >= 0 && write(fd, src, NP * PAGE) == (ssize_t)(NP * PAGE), "wrote a %u-page file", NP);
    unsigned char *map = mmap(NULL, NP * PAGE, PROT_READ, MAP_PRIVATE, fd, 0);
    ok(map != MAP_FAILED, "mapped it");
    if (map == MAP_FAILED) {
        close(fd);
        xfree(src);
        return;
    }
    EXPECT_EQ(pages_mapped_bytes(map, NP * PAGE), 0);
    volatile unsigned sum = 0;
    for (size_t i = 0; i < NP * PAGE; i += PAGE)
        sum += map[i];
    EXPECT_EQ(pages_mapped_bytes(map, NP * PAGE), NP * PAGE);
    /* Bytes 10.5 pages .. 20.25 pages: pages 10..20 (11 of them) go. */
    EXPECT_OK(pages_drop(map + 10 * PAGE + PAGE / 2, 9 * PAGE + 3 * PAGE / 4));
    EXPECT_EQ(pages_mapped_bytes(map, NP * PAGE), (NP - 11) * PAGE);
    EXPECT_EQ(pages_mapped_bytes(map + 10 * PAGE, 11 * PAGE), 0);
    ok(!memcmp(map, src, NP * PAGE), "contents unchanged after the dropped pages come back");
    EXPECT_EQ(pages_mapped_bytes(map, NP * PAGE), NP * PAGE);
    EXPECT_OK(pages_drop(map, 0));
    (void)sum;
    munmap(map, NP * PAGE);
    close(fd);
    unlink(path);
    xfree(src);
}

/* ---- a model's pages -------------------------------------------------------------------- */

/* Bytes of the pages lying wholly inside one of m's weights that are mapped now;
 * *span: the bytes of all those pages. Pages at a weight's ends may hold another
 * tensor's bytes, and the kernel maps a fault's neighbours (fault-around) whatever
 * tensor they hold, so only these pages say what the planner did with m's. */
static size_t model_mapped(const struct patcher_model *m, size_t *span)
{
    size_t mapped = 0;
    *span = 0;
    for (int l = 0; l < patcher_model_layer_count(m); l++)
        for (int j = 0; j < patcher_model_weight_count(m, l); j++) {
            int nd;
            int64_t sh[4];
            enum tensor_dtype dt;
            uintptr_t a = (uintptr_t)patcher_model_host_data(m, l, j, &dt, &nd, sh);
            size_t n = tensor_dtype_size(dt);
            for (int k = 0; k < nd; k++)
                n *= (size_t)sh[k];
            uintptr_t pa = (a + PAGE - 1) / PAGE * PAGE, pb = (a + n) / PAGE * PAGE;
            if (pb <= pa)
                continue;
            *span += pb - pa;
            mapped += pages_mapped_bytes((const void *)pa, pb - pa);
        }
    return mapped;
}

static int load(struct mm *mm, struct patcher *p, struct err *e)
{
    struct mm_request req = {.n_models = 1, .activation_bytes = (size_t)64 << 20};
    req.models[0] = p;
    return mm_load_models(mm, &req, NULL, e);
}

#define EPS_N (2 * 4 * 8 * 8)

/* Load the UNet alone and run one batch-2 eval into out. */
static int unet_run(struct mm *mm, struct patcher *p, const struct model_config *cfg, float *out)
{
    struct err e = {0};
    int rc = load(mm, p, &e);
    if (rc < 0) {
        printf("# load unet: %s\n", e.msg);
        return rc;
    }
    struct dev *d = patcher_device(p);
    int64_t xs[4] = {2, 4, 8, 8}, cs[3] = {2, 77, cfg->unet.ctx_dim};
    struct tensor *x = ref_new_wave(d, 4, xs, 0.37, 0.1), *ctx = ref_new_wave(d, 3, cs, 0.011, 0.5);
    struct tensor *eps = NULL;
    float ts[2] = {500, 20};
    if ((rc = tensor_new(d, TENSOR_F32, 4, xs, &eps, &e)) == 0 &&
        (rc = unet_eval(p, &cfg->unet, x, ts, ctx, NULL, eps, NULL, &e)) == 0)
        rc = tensor_read_f32(eps, out, EPS_N, &e);
    if (rc < 0)
        printf("# unet: %s\n", e.msg);
    mm_node_end(mm, NULL);
    tensor_free(eps);
    tensor_free(x);
    tensor_free(ctx);
    return rc;
}

/* Load CLIP alone and encode a prompt; *cond is the caller's (xfree). */
static int clip_run(struct mm *mm, struct patcher *p, const struct model_ckpt *ck, float **cond,
                    int64_t *n)
{
    struct err e = {0};
    struct clip_tokens tk;
    float *pooled = NULL;
    clip_tokenize_prompt(tok, "a photo of a cat", &tk);
    int rc = load(mm, p, &e);
    if (rc == 0)
        rc = text_encode(p, &ck->cfg.text[0], model_prefix(&ck->cfg, MODEL_CLIP), &tk,
                         &(struct text_encode_opts){.layer = -1, .norm_hidden = 1}, cond, &pooled,
                         NULL, &e);
    *n = (int64_t)tk.n_chunks * 77 * ck->cfg.text[0].width;
    clip_tokens_release(&tk);
    xfree(pooled);
    mm_node_end(mm, NULL);
    if (rc < 0)
        printf("# clip: %s\n", e.msg);
    return rc;
}

/* CLIP, UNet, VAE in turn on the cpu device, as a txt2img prompt runs them, twice. */
/* how: 0 the default, 1 mm_config.keep_weight_pages, 2 --highvram (keeps them too). */
static void test_cpu(const char *path, int how, float *eps_out)
{
    static const char *const modes[3] = {"default", "keep_weight_pages", "highvram"};
    const char *mode = modes[how];
    int keep = how != 0;
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt ck;
    struct err e = {0};
    if (model_ckpt_load(path, MODEL_LOAD_ALL, f32, &ck, &e) < 0) {
        ok(0, "load: %s", e.msg);
        return;
    }
    struct patcher_model *um = ck.model[MODEL_UNET], *cm = ck.model[MODEL_CLIP];
    struct patcher_model *vm = ck.model[MODEL_VAE];
    size_t uspan, cspan;
    size_t u0 = model_mapped(um, &uspan), c0 = model_mapped(cm, &cspan);
    ok(uspan >= 16 * PAGE && cspan >= 16 * PAGE, "%s: unet spans %zu pages, clip %zu", mode,
       uspan / PAGE, cspan / PAGE);
    ok(u0 == 0 && c0 == 0, "%s: after loading, no weight page is mapped (unet %zu, clip %zu bytes)",
       mode, u0, c0);

    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    mc.keep_weight_pages = how == 1;
    if (how == 2)
        mc.vram_state = MM_VRAM_HIGH_VRAM; /* no GPU here: the cpu device all the same */
    struct mm *mm = NULL;
    if (mm_new(&mc, &mm, &e) < 0) {
        ok(0, "mm_new: %s", e.msg);
        model_ckpt_release(&ck);
        return;
    }
    struct patcher *pu = patcher_new(um), *pc = patcher_new(cm), *pv = patcher_new(vm);
    float *cond1 = NULL, *cond2 = NULL, eps1[EPS_N], eps2[EPS_N];
    int64_t n1 = 0, n2 = 0;
    int rc = clip_run(mm, pc, &ck, &cond1, &n1);
    /* The token embedding is read a row per token: only some of CLIP's pages. */
    size_t c1 = model_mapped(cm, &cspan);
    ok(rc == 0 && c1 > cspan / 16, "%s: CLIP encoded; %zu of its %zu bytes of pages mapped", mode,
       c1, cspan);
    rc = rc ? rc : unet_run(mm, pu, &ck.cfg, eps1);
    /* Dropped, CLIP keeps at most what the UNet's faults mapped around them: the kernel
     * maps a faulting page's cached neighbours too (fault-around, 64 KiB), and a CLIP
     * weight next to a UNet weight in the file gets a page or two back that way. */
    size_t c2 = model_mapped(cm, &cspan), u2 = model_mapped(um, &uspan);
    ok(rc == 0 && (keep ? c2 == c1 : c2 <= ((size_t)128 << 10)) && u2 == uspan,
       "%s: after the UNet's node, CLIP has %zu of %zu bytes mapped (want %s), the UNet %zu of "
       "%zu (all)", mode, c2, cspan, keep ? "as many as before" : "<= 128 KiB", u2, uspan);
    rc = rc ? rc : load(mm, pv, &e);
    mm_node_end(mm, NULL);
    size_t u3 = model_mapped(um, &uspan);
    ok(rc == 0 && u3 == (keep ? uspan : 0),
       "%s: once the VAE is loaded alone, the UNet has %zu of %zu bytes mapped (want %s)", mode,
       u3, uspan, keep ? "all" : "none");
    /* A second prompt: the pages come back from the page cache, same bytes. */
    rc = rc ? rc : clip_run(mm, pc, &ck, &cond2, &n2);
    rc = rc ? rc : unet_run(mm, pu, &ck.cfg, eps2);
    ok(rc == 0 && n1 == n2 && cond1 && cond2 && !memcmp(cond1, cond2, (size_t)n1 * 4) &&
           !memcmp(eps1, eps2, sizeof(eps1)),
       "%s: a second CLIP encode and UNet eval equal the first bit for bit", mode);
    memcpy(eps_out, eps1, sizeof(eps1));
    xfree(cond1);
    xfree(cond2);
    patcher_unref(pu);
    patcher_unref(pc);
    patcher_unref(pv);
    mm_free(mm);
    model_ckpt_release(&ck);
}

/* Converted weights live on the heap: the same sequence must leave them intact. */
static void test_converted(const char *path, const float *eps_ref)
{
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt ck;
    struct err e = {0};
    if (model_ckpt_load(path, MODEL_LOAD_ALL | MODEL_LOAD_CONVERT, f32, &ck, &e) < 0) {
        ok(0, "load converted: %s", e.msg);
        return;
    }
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    EXPECT_OK(mm_new(&mc, &mm, &e));
    struct patcher *pu = patcher_new(ck.model[MODEL_UNET]), *pv = patcher_new(ck.model[MODEL_VAE]);
    float eps1[EPS_N], eps2[EPS_N];
    int rc = unet_run(mm, pu, &ck.cfg, eps1);
    rc = rc ? rc : load(mm, pv, &e); /* would drop the UNet's pages if it were file-backed */
    mm_node_end(mm, NULL);
    EXPECT_EQ(patcher_model_drop_pages(ck.model[MODEL_UNET]), 0);
    rc = rc ? rc : unet_run(mm, pu, &ck.cfg, eps2);
    ok(rc == 0 && !memcmp(eps1, eps_ref, sizeof(eps1)) && !memcmp(eps2, eps_ref, sizeof(eps2)),
       "converted (heap) weights: eps before and after the VAE's load equals the borrowed "
       "model's");
    patcher_unref(pu);
    patcher_unref(pv);
    mm_free(mm);
    model_ckpt_release(&ck);
}

/* A device with its own copies: the host pages go once uploaded. */
static void test_sim(const char *path, const float *eps_ref)
{
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt ck;
    struct err e = {0};
    if (model_ckpt_load(path, MODEL_LOAD_UNET, f32, &ck, &e) < 0) {
        ok(0, "load unet: %s", e.msg);
        return;
    }
    struct patcher_model *um = ck.model[MODEL_UNET];
    char spec[64];
    snprintf(spec, sizeof(spec), "sim:%zuK", (patcher_model_bytes(um) + ((size_t)96 << 20)) >> 10);
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = spec;
    struct mm *mm = NULL;
    EXPECT_OK(mm_new(&mc, &mm, &e));
    struct patcher *pu = patcher_new(um);
    float eps[EPS_N];
    int rc = unet_run(mm, pu, &ck.cfg, eps);
    size_t span, u = model_mapped(um, &span);
    ok(rc == 0 && u == 0 && span > 0,
       "sim device: after the upload none of the UNet's %zu bytes of pages is mapped (%zu)", span,
       u);
    ok(rc == 0 && !memcmp(eps, eps_ref, sizeof(eps)), "sim device: eps equals the cpu device's");
    patcher_unref(pu);
    mm_free(mm);
    model_ckpt_release(&ck);
}

int main(int argc, char **argv)
{
    const char *tokdir = argc > 1 ? argv[1] : NULL;
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    struct err e = {0};
    EXPECT_OK(clip_tokenizer_load(tokdir, &tok, &e));
    char dir[] = "/tmp/test_memory_pages.XXXXXX";
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    test_pages_util(dir);
    char path[256];
    snprintf(path, sizeof(path), "%s/tiny_f16.safetensors", dir);
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    o.dtype = ST_DTYPE_F16;
    EXPECT_OK(ckpt_gen_write(&o, path, &e));
    float eps_drop[EPS_N], eps_keep[EPS_N], eps_hv[EPS_N];
    test_cpu(path, 0, eps_drop);
    test_cpu(path, 1, eps_keep);
    test_cpu(path, 2, eps_hv);
    ok(!memcmp(eps_drop, eps_keep, sizeof(eps_drop)) && !memcmp(eps_drop, eps_hv, sizeof(eps_drop)),
       "the UNet eps is the same with and without unmapping");
    test_converted(path, eps_drop);
    test_sim(path, eps_drop);
    unlink(path);
    rmdir(dir);
    clip_tokenizer_free(tok);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
