/*
 * fuzz_prompt — POST /prompt's parser and validator (graph/graph.h): graph_json_parse
 * over the raw body, then graph_validate_targets / graph_validate on its "prompt"
 * member, the way server/routes.c calls them. A body without a "prompt" member is
 * validated as the prompt itself, so that mutations of bare prompts reach the validator
 * without the wrapper.
 *
 * The graph context (device "cpu", every built-in node class) is made once on a
 * temporary base folder holding one checkpoint name, one LoRA name and one input image,
 * so that model combos and LoadImage validation have something to accept.
 *
 * Contract checked: the parser never reads past the body; validation returns 0 and an
 * object of node_errors, an outputs array of strings, and an error object exactly when
 * not ok; validating the coerced prompt a second time is accepted the same way (coercion
 * is idempotent); results print; the per-input alloc_live_count() balance is zero.
 *
 * FUZZ_PROMPT_DICT=path writes a libFuzzer dictionary of class and input names from the
 * registry (tests/fuzz/prompt.dict was made that way).
 */
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "fuzz_util.h"
#include "graph.h"
#include "memmgr.h"
#include "node_imageio.h"
#include "node_registry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static struct graph_ctx *G;
static char base[64];
static char dirs[5][128]; /* models, input, output, temp, models/checkpoints ... */

static void touch(const char *path)
{
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f != NULL);
    fclose(f);
}

static void teardown(void)
{
    graph_free(G);
    G = NULL;
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    if (base[0] && system(cmd) != 0)
        fprintf(stderr, "fuzz_prompt: cannot remove %s\n", base);
}

static void write_dict(const char *path)
{
    FILE *f = fopen(path, "w");
    FUZZ_CHECK(f != NULL);
    const struct node_registry *r = graph_registry(G);
    for (size_t i = 0; i < node_registry_count(r); i++) {
        const struct node_class *c = node_registry_at(r, i);
        fprintf(f, "\"\\\"%s\\\"\"\n", c->name);
        for (const struct node_input_def *in = c->inputs; in && in->name; in++)
            fprintf(f, "\"\\\"%s\\\"\"\n", in->name);
    }
    fclose(f);
}

static void setup(void)
{
    fuzz_quiet_logs();
    snprintf(base, sizeof(base), "/tmp/latentd-fuzz-prompt-XXXXXX");
    FUZZ_CHECK(mkdtemp(base) != NULL);
    static const char *const sub[] = {"models", "input", "output", "temp"};
    for (int i = 0; i < 4; i++) {
        snprintf(dirs[i], sizeof(dirs[i]), "%s/%s", base, sub[i]);
        FUZZ_CHECK(mkdir(dirs[i], 0755) == 0);
    }
    char p[256];
    static const char *const folders[] = {"checkpoints", "loras", "vae", "embeddings",
                                          "upscale_models"};
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof(p), "%s/%s", dirs[0], folders[i]);
        FUZZ_CHECK(mkdir(p, 0755) == 0);
    }
    /* Names only: validation lists files, it never opens a model. */
    snprintf(p, sizeof(p), "%s/checkpoints/v1-5-pruned-emaonly-fp16.safetensors", dirs[0]);
    touch(p);
    snprintf(p, sizeof(p), "%s/loras/lora.safetensors", dirs[0]);
    touch(p);
    snprintf(p, sizeof(p), "%s/example.png", dirs[1]);
    static const uint8_t px[2 * 2 * 3] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9};
    struct err e = {0};
    FUZZ_CHECK(node_png_write(p, px, 2, 2, 3, 1, NULL, 0, &e) == 0);

    struct graph_config cfg = {0};
    cfg.base_dir = base;
    cfg.models_dir = dirs[0];
    cfg.input_dir = dirs[1];
    cfg.output_dir = dirs[2];
    cfg.temp_dir = dirs[3];
    cfg.cache_mode = GRAPH_CACHE_CLASSIC;
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    cfg.mm = &mc;
    G = graph_new(&cfg, &e);
    if (!G) {
        fprintf(stderr, "fuzz_prompt: graph_new: %s\n", e.msg);
        abort();
    }
    atexit(teardown);
    const char *dict = getenv("FUZZ_PROMPT_DICT");
    if (dict)
        write_dict(dict);
}

static void check_validation(const struct graph_validation *v)
{
    FUZZ_CHECK(cJSON_IsObject(v->node_errors));
    FUZZ_CHECK(cJSON_IsArray(v->outputs));
    const cJSON *o;
    cJSON_ArrayForEach(o, v->outputs)
        FUZZ_CHECK(cJSON_IsString(o));
    if (v->ok) {
        FUZZ_CHECK(v->error == NULL);
    } else {
        FUZZ_CHECK(cJSON_IsObject(v->error));
        FUZZ_CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(v->error, "type")));
        FUZZ_CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(v->error, "message")));
    }
    char *s = cJSON_PrintUnformatted(v->node_errors);
    FUZZ_CHECK(s != NULL);
    cJSON_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (!G)
        setup();
    long live = alloc_live_count();
    cJSON *body = graph_json_parse((const char *)data, n);
    if (!cJSON_IsObject(body))
        goto out;
    cJSON *prompt = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    if (!prompt)
        prompt = body;
    if (!cJSON_IsObject(prompt))
        goto out;
    const cJSON *targets = cJSON_GetObjectItemCaseSensitive(body, "partial_execution_targets");
    struct graph_validation v = {0};
    FUZZ_CHECK(graph_validate_targets(G, prompt, cJSON_IsArray(targets) ? targets : NULL, &v) == 0);
    check_validation(&v);
    int ok = v.ok;
    graph_validation_release(&v);

    /* The coerced prompt is what the server stores and later runs: it must validate alike. */
    struct graph_validation v2 = {0};
    FUZZ_CHECK(graph_validate_targets(G, prompt, cJSON_IsArray(targets) ? targets : NULL, &v2) == 0);
    check_validation(&v2);
    FUZZ_CHECK(v2.ok == ok);
    graph_validation_release(&v2);

    struct graph_validation v3 = {0};
    FUZZ_CHECK(graph_validate(G, prompt, &v3) == 0);
    check_validation(&v3);
    graph_validation_release(&v3);

    /* Raw items (exact big integers) must print back. */
    char *s = cJSON_PrintUnformatted(body);
    FUZZ_CHECK(s != NULL);
    cJSON_free(s);
out:
    cJSON_Delete(body);
    FUZZ_CHECK(alloc_live_count() == live);
    return 0;
}
