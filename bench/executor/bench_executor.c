/*
 * bench_executor — executor overhead per node (see bench/executor.cmake).
 *
 * Nodes are trivial (one INT add), so the time per node is the executor's own
 * work: signature hashing, cache lookups and inserts, ordering, input resolution,
 * value allocation, and (in the "events" rows) building every event's JSON for a
 * sink that drops it. Times are medians of several runs, measured in this process.
 *
 * `bench_executor --count-cached [raw|native]` runs only the chain's all-cached
 * case (after one untimed fresh run), with callgrind collection switched on around
 * those runs alone: on a loaded machine instruction counts compare trees where
 * times cannot. Run it as
 *   valgrind --tool=callgrind --collect-atstart=no bench_executor --count-cached
 * (without valgrind the toggles do nothing and it only prints the times).
 * `--count-validate` collects the chain's validations alone, and
 * `--count-server fresh|cached` its prompts on the server's path (validate, run the
 * native prompt, free both), fresh or fully cached, the same way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#endif
#endif
#ifndef CALLGRIND_TOGGLE_COLLECT
#define CALLGRIND_TOGGLE_COLLECT
#endif

#include "buf.h"
#include "clock.h"
#include "graph.h"
#include "node_registry.h"

static int add_run(struct node_ctx *c)
{
    const struct value *a = node_in_at(c, 1), *b = node_in_at(c, 2);
    int64_t v = node_in_int_at(c, 0) + (a ? value_i64(a) : 0) + (b ? value_i64(b) : 0);
    node_set_output(c, 0, value_new_int(v));
    return 0;
}

static int out_run(struct node_ctx *c)
{
    (void)c;
    return 0;
}

static const struct node_input_def add_in[] = {
    {.name = "x", .type = "INT", .def = NODE_I(0)},
    {.name = "a", .type = "INT", .group = NODE_INPUT_OPTIONAL},
    {.name = "b", .type = "INT", .group = NODE_INPUT_OPTIONAL},
    NODE_INPUTS_END};
static const struct node_output_def int_out[] = {{.type = "INT"}, NODE_OUTPUTS_END};
static const struct node_input_def out_in[] = {{.name = "v", .type = "INT"}, NODE_INPUTS_END};
static const struct node_output_def no_out[] = {NODE_OUTPUTS_END};
static const struct node_class badd = {.name = "BAdd", .inputs = add_in, .outputs = int_out, .run = add_run};
static const struct node_class bout = {.name = "BOut", .flags = NODE_CLASS_OUTPUT, .inputs = out_in,
                                       .outputs = no_out, .run = out_run};

/* Stand-in declarations for the SD nodes of the default workflow (sockets only). */
static const struct node_input_def ckpt_in[] = {{.name = "ckpt_name", .type = "STRING"}, NODE_INPUTS_END};
static const struct node_output_def ckpt_out[] = {{.type = "MODEL"}, {.type = "CLIP"}, {.type = "VAE"},
                                                  NODE_OUTPUTS_END};
static const struct node_input_def clip_in[] = {{.name = "text", .type = "STRING", .multiline = 1},
                                                {.name = "clip", .type = "CLIP"}, NODE_INPUTS_END};
static const struct node_output_def cond_out[] = {{.type = "CONDITIONING"}, NODE_OUTPUTS_END};
static const struct node_input_def latent_in[] = {
    {.name = "width", .type = "INT", .min = NODE_I(16), .max = NODE_I(16384)},
    {.name = "height", .type = "INT", .min = NODE_I(16), .max = NODE_I(16384)},
    {.name = "batch_size", .type = "INT", .min = NODE_I(1), .max = NODE_I(4096)}, NODE_INPUTS_END};
static const struct node_output_def latent_out[] = {{.type = "LATENT"}, NODE_OUTPUTS_END};
static const char *const samplers[] = {"euler", "euler_ancestral", "dpmpp_2m", "ddim", NULL};
static const char *const schedulers[] = {"normal", "karras", "simple", NULL};
static const struct node_input_def ks_in[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "seed", .type = "INT", .min = NODE_I(0), .max = NODE_U64_MAX},
    {.name = "steps", .type = "INT", .min = NODE_I(1), .max = NODE_I(10000)},
    {.name = "cfg", .type = "FLOAT", .min = NODE_F(0.0), .max = NODE_F(100.0)},
    {.name = "sampler_name", .type = NODE_COMBO, .options = samplers},
    {.name = "scheduler", .type = NODE_COMBO, .options = schedulers},
    {.name = "positive", .type = "CONDITIONING"}, {.name = "negative", .type = "CONDITIONING"},
    {.name = "latent_image", .type = "LATENT"},
    {.name = "denoise", .type = "FLOAT", .min = NODE_F(0.0), .max = NODE_F(1.0)}, NODE_INPUTS_END};
static const struct node_input_def vae_in[] = {{.name = "samples", .type = "LATENT"},
                                               {.name = "vae", .type = "VAE"}, NODE_INPUTS_END};
static const struct node_output_def image_out[] = {{.type = "IMAGE"}, NODE_OUTPUTS_END};
static const struct node_class s_ckpt = {.name = "CheckpointLoaderSimple", .inputs = ckpt_in,
                                         .outputs = ckpt_out, .run = out_run};
static const struct node_class s_clip = {.name = "CLIPTextEncode", .inputs = clip_in, .outputs = cond_out,
                                         .run = out_run};
static const struct node_class s_latent = {.name = "EmptyLatentImage", .inputs = latent_in,
                                           .outputs = latent_out, .run = out_run};
static const struct node_class s_ks = {.name = "KSampler", .inputs = ks_in, .outputs = latent_out,
                                       .run = out_run};
static const struct node_class s_vae = {.name = "VAEDecode", .inputs = vae_in, .outputs = image_out,
                                        .run = out_run};

static double now_us(void)
{
    return clock_mono_sec() * 1e6;
}

/* This thread's CPU time (us): on a loaded machine it ignores time spent waiting. */
static double cpu_us(void)
{
    return clock_thread_cpu_sec() * 1e6;
}

/* Minor page faults of this thread so far: fresh heap pages cost a fault and a
 * zeroed page each, time that instruction counts do not show. */
static long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_minflt;
}

static void add_link(cJSON *inputs, const char *name, const char *src)
{
    cJSON *l = cJSON_AddArrayToObject(inputs, name);
    cJSON_AddItemToArray(l, cJSON_CreateString(src));
    cJSON_AddItemToArray(l, cJSON_CreateNumber(0));
}

static cJSON *add_node(cJSON *p, const char *id, const char *cls, int x)
{
    cJSON *n = cJSON_AddObjectToObject(p, id);
    cJSON_AddStringToObject(n, "class_type", cls);
    cJSON *in = cJSON_AddObjectToObject(n, "inputs");
    if (x >= 0)
        cJSON_AddNumberToObject(in, "x", x);
    return in;
}

/* n trivial nodes in a chain, then one output. */
static cJSON *make_chain(int n, int salt)
{
    cJSON *p = cJSON_CreateObject();
    char id[32], prev[32];
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof(id), "%d", i);
        cJSON *in = add_node(p, id, "BAdd", i == 0 ? salt : 1);
        if (i)
            add_link(in, "a", prev);
        memcpy(prev, id, sizeof(id));
    }
    add_link(add_node(p, "out", "BOut", -1), "v", prev);
    return p;
}

/* A root, w nodes reading it, a binary reduction tree back to one, and an output:
 * about 2w nodes. */
static cJSON *make_wide(int w, int salt)
{
    cJSON *p = cJSON_CreateObject();
    add_node(p, "r", "BAdd", salt);
    char id[32], a[32], b[32];
    int *layer = malloc(sizeof(int) * (size_t)w), next_id = 0, n = w;
    for (int i = 0; i < w; i++) {
        snprintf(id, sizeof(id), "n%d", next_id);
        add_link(add_node(p, id, "BAdd", i), "a", "r");
        layer[i] = next_id++;
    }
    while (n > 1) {
        int m = 0;
        for (int i = 0; i + 1 < n; i += 2) {
            snprintf(id, sizeof(id), "n%d", next_id);
            snprintf(a, sizeof(a), "n%d", layer[i]);
            snprintf(b, sizeof(b), "n%d", layer[i + 1]);
            cJSON *in = add_node(p, id, "BAdd", 0);
            add_link(in, "a", a);
            add_link(in, "b", b);
            layer[m++] = next_id++;
        }
        if (n % 2)
            layer[m++] = layer[n - 1];
        n = m;
    }
    snprintf(a, sizeof(a), "n%d", layer[0]);
    add_link(add_node(p, "out", "BOut", -1), "v", a);
    free(layer);
    return p;
}

static void drop_send(void *user, const char *type, cJSON *data)
{
    (void)user;
    (void)type;
    cJSON_Delete(data);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define REPS 5

/* Median time (us) of one execution; `fresh`: clear the cache before each run.
 * `native`: validation's native prompt, as the server runs it (NULL: the raw JSON). */
static double time_exec(struct graph_ctx *g, cJSON *p, const struct graph_prompt *native,
                        cJSON *outs, int events, int fresh)
{
    double t[REPS];
    struct graph_events ev = {.send = drop_send};
    struct graph_job job = {.prompt_id = "bench", .prompt = p, .native = native,
                            .outputs_to_execute = outs};
    for (int r = 0; r < REPS; r++) {
        if (fresh)
            graph_free_memory(g, 0, 1);
        struct graph_result res;
        double t0 = now_us();
        graph_execute(g, &job, events ? &ev : NULL, &res);
        t[r] = now_us() - t0;
        if (res.status != GRAPH_STATUS_SUCCESS) {
            fprintf(stderr, "bench prompt failed\n");
            exit(1);
        }
        graph_result_release(&res);
    }
    qsort(t, REPS, sizeof(double), cmp_d);
    return t[REPS / 2];
}

static double time_validate(struct graph_ctx *g, cJSON *p, cJSON **outs)
{
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        struct graph_validation v;
        double t0 = now_us();
        graph_validate(g, p, &v);
        t[r] = now_us() - t0;
        if (!v.ok) {
            char *e = cJSON_PrintUnformatted(v.node_errors);
            fprintf(stderr, "bench prompt invalid: %s\n", e);
            exit(1);
        }
        if (outs && r == REPS - 1)
            *outs = cJSON_Duplicate(v.outputs, 1);
        graph_validation_release(&v);
    }
    qsort(t, REPS, sizeof(double), cmp_d);
    return t[REPS / 2];
}

/* One prompt as the server handles it: validation (which builds the native prompt),
 * the executor's run of that prompt, then freeing both. Events are off, as in the
 * other rows. */
static void server_once(struct graph_ctx *g, cJSON *p, int collect)
{
    struct graph_validation v;
    struct graph_result res;
    if (collect)
        CALLGRIND_TOGGLE_COLLECT;
    graph_validate(g, p, &v);
    struct graph_job job = {.prompt_id = "bench", .prompt = p, .native = v.prompt,
                            .outputs_to_execute = v.outputs};
    int ok = v.ok && graph_execute(g, &job, NULL, &res) == 0;
    if (ok) {
        ok = res.status == GRAPH_STATUS_SUCCESS;
        graph_result_release(&res);
    }
    graph_validation_release(&v);
    if (collect)
        CALLGRIND_TOGGLE_COLLECT;
    if (!ok) {
        fprintf(stderr, "bench prompt failed\n");
        exit(1);
    }
}

/* Median time (us) of server_once; `fresh`: clear the cache before each (untimed),
 * else one untimed run first so that every timed one is fully cached. */
static double time_server(struct graph_ctx *g, cJSON *p, int fresh)
{
    double t[REPS];
    if (!fresh)
        server_once(g, p, 0);
    for (int r = 0; r < REPS; r++) {
        if (fresh)
            graph_free_memory(g, 0, 1);
        double t0 = now_us();
        server_once(g, p, 0);
        t[r] = now_us() - t0;
    }
    qsort(t, REPS, sizeof(double), cmp_d);
    return t[REPS / 2];
}

static void bench_graph(struct graph_ctx *g, const char *name, cJSON *p)
{
    int n = cJSON_GetArraySize(p);
    cJSON *outs = NULL;
    double tv = time_validate(g, p, &outs);
    double fresh = time_exec(g, p, NULL, outs, 0, 1);
    double fresh_ev = time_exec(g, p, NULL, outs, 1, 1);
    time_exec(g, p, NULL, outs, 0, 1);
    double cached = time_exec(g, p, NULL, outs, 1, 0);
    printf("%-6s %6d nodes | validate %6.2f us/node | run fresh %6.2f us/node (events %6.2f) | "
           "all cached %6.2f us/node\n",
           name, n, tv / n, fresh / n, fresh_ev / n, cached / n);
    /* The server's path: validation's native prompt, constants already typed. */
    struct graph_validation v;
    graph_validate(g, p, &v);
    double native = time_exec(g, p, v.prompt, outs, 0, 1);
    time_exec(g, p, v.prompt, outs, 0, 1);
    double native_cached = time_exec(g, p, v.prompt, outs, 1, 0);
    graph_validation_release(&v);
    printf("%-6s %6d nodes | from validation's native prompt: run fresh %6.2f us/node, "
           "all cached %6.2f us/node\n",
           name, n, native / n, native_cached / n);
    double server = time_server(g, p, 1), server_cached = time_server(g, p, 0);
    printf("%-6s %6d nodes | server path (validate + run + free): fresh %6.2f us/node, "
           "all cached %6.2f us/node\n",
           name, n, server / n, server_cached / n);
    cJSON_Delete(outs);
}

/* The chain's all-cached runs alone, collected by callgrind (see the top). The
 * same runs as bench_graph's come first (validation, fresh runs with and without
 * events), so the heap is in the state the "all cached" row meets: the cached runs'
 * speed depends on where malloc puts their objects. Times are wall clock and
 * thread CPU time (the latter ignores time spent descheduled on a loaded machine). */
static void count_cached(struct graph_ctx *g, int native)
{
    cJSON *p = make_chain(10000, 1), *outs = NULL;
    time_validate(g, p, &outs);
    time_exec(g, p, NULL, outs, 0, 1);
    time_exec(g, p, NULL, outs, 1, 1);
    time_exec(g, p, NULL, outs, 0, 1);
    struct graph_validation v = {0};
    if (native)
        graph_validate(g, p, &v);
    struct graph_events ev = {.send = drop_send};
    struct graph_job job = {.prompt_id = "bench", .prompt = p, .native = native ? v.prompt : NULL,
                            .outputs_to_execute = outs};
    double t[REPS], c[REPS];
    for (int r = 0; r < REPS; r++) {
        struct graph_result res;
        double t0 = now_us(), c0 = cpu_us();
        CALLGRIND_TOGGLE_COLLECT;
        graph_execute(g, &job, &ev, &res);
        CALLGRIND_TOGGLE_COLLECT;
        c[r] = cpu_us() - c0;
        t[r] = now_us() - t0;
        if (res.status != GRAPH_STATUS_SUCCESS) {
            fprintf(stderr, "bench prompt failed\n");
            exit(1);
        }
        graph_result_release(&res);
    }
    qsort(t, REPS, sizeof(double), cmp_d);
    qsort(c, REPS, sizeof(double), cmp_d);
    int n = cJSON_GetArraySize(p);
    printf("chain %d nodes, all cached (%s), %d runs collected: median %.3f us/node, "
           "thread CPU time %.3f us/node\n",
           n, native ? "native prompt" : "raw JSON", REPS, t[REPS / 2] / n, c[REPS / 2] / n);
    if (native)
        graph_validation_release(&v);
    cJSON_Delete(outs);
    cJSON_Delete(p);
}

/* The chain's validations alone (--count-validate), or its prompts on the server's
 * path (--count-server fresh|cached: validate + run + free), collected by callgrind
 * like count_cached's runs; `what`: 0 validate, 1 server fresh, 2 server cached. */
static void count_server(struct graph_ctx *g, int what)
{
    cJSON *p = make_chain(10000, 1);
    server_once(g, p, 0); /* untimed: the cache is full for "cached" */
    double t[REPS], c[REPS];
    long faults[2] = {0, 0}; /* first run (the heap grows), the others */
    for (int r = 0; r < REPS; r++) {
        if (what == 1)
            graph_free_memory(g, 0, 1);
        long f0 = minor_faults();
        double t0 = now_us(), c0 = cpu_us();
        if (what == 0) {
            struct graph_validation v;
            CALLGRIND_TOGGLE_COLLECT;
            graph_validate(g, p, &v);
            CALLGRIND_TOGGLE_COLLECT;
            c[r] = cpu_us() - c0;
            t[r] = now_us() - t0;
            graph_validation_release(&v);
        } else {
            server_once(g, p, 1);
            c[r] = cpu_us() - c0;
            t[r] = now_us() - t0;
        }
        faults[r > 0] += minor_faults() - f0;
    }
    qsort(t, REPS, sizeof(double), cmp_d);
    qsort(c, REPS, sizeof(double), cmp_d);
    int n = cJSON_GetArraySize(p);
    static const char *const names[] = {"validate", "server path, fresh",
                                        "server path, all cached"};
    printf("chain %d nodes, %s, %d runs collected: median %.3f us/node, "
           "thread CPU time %.3f us/node; page faults %ld in the first run, %ld in the others\n",
           n, names[what], REPS, t[REPS / 2] / n, c[REPS / 2] / n, faults[0], faults[1]);
    cJSON_Delete(p);
}

/* Every row: the chain and the wide DAG, then the default workflow's validation. */
static void bench_all(struct graph_ctx *g)
{
    struct node_registry *r = graph_registry(g);
    printf("bench_executor: trivial INT-add nodes, median of %d runs; goal <= 2 us/node for a fresh run\n", REPS);
    cJSON *chain = make_chain(10000, 1);
    bench_graph(g, "chain", chain);
    cJSON_Delete(chain);
    cJSON *wide = make_wide(5000, 1);
    bench_graph(g, "wide", wide);
    cJSON_Delete(wide);

    struct buf file;
    buf_init(&file);
    if (buf_read_file(&file, LATENTD_FIXTURES_DIR "/default_workflow_api.json") == 0) {
        cJSON *p = graph_json_parse(file.ptr, file.len);
        double t[101];
        for (int k = 0; k < 101; k++) {
            cJSON *q = cJSON_Duplicate(p, 1);
            struct graph_validation v;
            double t0 = now_us();
            graph_validate(g, q, &v);
            t[k] = now_us() - t0;
            if (!v.ok && k == 0) {
                char *s = cJSON_PrintUnformatted(v.node_errors);
                printf("default workflow: invalid here (%s)\n", s);
                free(s);
            }
            graph_validation_release(&v);
            cJSON_Delete(q);
        }
        qsort(t, 101, sizeof(double), cmp_d);
        printf("default workflow (%s SD node declarations): validate %.1f us (median of 101)\n",
               node_registry_find(r, "CheckpointLoaderSimple") == &s_ckpt ? "stand-in" : "real", t[50]);
        cJSON_Delete(p);
    }
    buf_release(&file);
}

int main(int argc, char **argv)
{
    char tmpl[] = "/tmp/latentd-bench-XXXXXX";
    char *base = mkdtemp(tmpl);
    struct graph_config cfg = {.base_dir = base, .models_dir = base, .input_dir = base,
                               .output_dir = base, .temp_dir = base, .cache_mode = GRAPH_CACHE_CLASSIC};
    /* The workflow's checkpoint must be listed for the real CheckpointLoaderSimple
     * (validation only lists the folder; the file is never read). */
    char path[512];
    snprintf(path, sizeof(path), "%s/checkpoints", base);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/checkpoints/v1-5-pruned-emaonly-fp16.safetensors", base);
    FILE *ck = fopen(path, "wb");
    if (ck)
        fclose(ck);
    struct err e = {0};
    struct graph_ctx *g = graph_new(&cfg, &e);
    if (!g) {
        fprintf(stderr, "graph_new: %s\n", e.msg);
        return 1;
    }
    struct node_registry *r = graph_registry(g);
    node_registry_add(r, &badd);
    node_registry_add(r, &bout);
    const struct node_class *sd[] = {&s_ckpt, &s_clip, &s_latent, &s_ks, &s_vae};
    for (size_t i = 0; i < sizeof(sd) / sizeof(sd[0]); i++)
        if (!node_registry_find(r, sd[i]->name)) /* the real ones may exist by now */
            node_registry_add(r, sd[i]);

    if (argc > 1 && strcmp(argv[1], "--count-cached") == 0)
        count_cached(g, argc > 2 && strcmp(argv[2], "native") == 0);
    else if (argc > 1 && strcmp(argv[1], "--count-validate") == 0)
        count_server(g, 0);
    else if (argc > 1 && strcmp(argv[1], "--count-server") == 0)
        count_server(g, argc > 2 && strcmp(argv[2], "cached") == 0 ? 2 : 1);
    else
        bench_all(g);
    graph_free(g);
    unlink(path);
    snprintf(path, sizeof(path), "%s/checkpoints", base);
    rmdir(path);
    rmdir(base);
    return 0;
}
