/*
 * fuzz_lora — LoRA files as LoraLoader reads them (models/lora/lora.h, lora_apply):
 * the safetensors header, grouping tensor names into modules by suffix, mapping module
 * prefixes to checkpoint keys and checking the factors' shapes against the weight.
 *
 * A tiny random-weight SD1.5 checkpoint (tools/ckpt_gen.h defaults) is generated and
 * loaded once; each input is written as a .safetensors file and applied to fresh clones
 * of the UNet and CLIP patchers, which are dropped again afterwards.
 *
 * Contract checked: 0, or a negative ERR_* with a message; patch counts add up.
 */
#include <unistd.h>

#include "ckpt_gen.h"
#include "fuzz_util.h"
#include "memmgr.h"
#include "checkpoint.h"
#include "lora.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static char dir[64], ck_path[128], lora_path[128];
static struct model_ckpt ck;
static struct patcher *u0, *c0;

static void teardown(void)
{
    patcher_unref(u0);
    patcher_unref(c0);
    model_ckpt_release(&ck);
    unlink(ck_path);
    unlink(lora_path);
    rmdir(dir);
}

static void setup(void)
{
    fuzz_quiet_logs();
    snprintf(dir, sizeof(dir), "/tmp/latentd-fuzz-lora-XXXXXX");
    FUZZ_CHECK(mkdtemp(dir) != NULL);
    snprintf(ck_path, sizeof(ck_path), "%s/tiny.safetensors", dir);
    snprintf(lora_path, sizeof(lora_path), "%s/lora.safetensors", dir);
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    struct err e = {0};
    FUZZ_CHECK(ckpt_gen_write(&o, ck_path, &e) == 0);
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    if (model_ckpt_load(ck_path, MODEL_LOAD_UNET | MODEL_LOAD_CLIP, f32, &ck, &e) < 0) {
        fprintf(stderr, "fuzz_lora: %s\n", e.msg);
        abort();
    }
    u0 = patcher_new(ck.model[MODEL_UNET]);
    c0 = patcher_new(ck.model[MODEL_CLIP]);
    atexit(teardown);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (!u0)
        setup();
    FILE *f = fopen(lora_path, "wb");
    FUZZ_CHECK(f != NULL);
    FUZZ_CHECK(fwrite(data, 1, n, f) == n);
    FUZZ_CHECK(fclose(f) == 0);
    struct patcher *u = patcher_clone(u0), *c = patcher_clone(c0);
    struct lora_stats st;
    memset(&st, 0, sizeof(st));
    struct err e = {0};
    int rc = lora_apply(lora_path, &ck.cfg, u, 0.5f, c, 1.5f, NULL, &st, &e);
    if (rc < 0)
        FUZZ_CHECK(e.msg[0] != '\0');
    else
        FUZZ_CHECK(rc == 0 && st.unet_patched >= 0 && st.clip_patched >= 0 &&
                   st.unet_patched + st.clip_patched <= st.modules);
    patcher_unref(u);
    patcher_unref(c);
    return 0;
}
