/*
 * Shared helpers for the graph and nodes unit tests: a temporary base folder
 * (models/input/output/temp), a graph context on it, and a fake graph_events
 * sink that records every event in order.
 */
#ifndef LATENTD_TESTS_GRAPH_TEST_UTIL_H
#define LATENTD_TESTS_GRAPH_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "graph.h"
#include "memmgr.h"

struct tdirs {
    char base[256], models[300], input[300], output[300], temp[300];
};

static inline void tdirs_make(struct tdirs *d)
{
    snprintf(d->base, sizeof(d->base), "/tmp/latentd-graph-XXXXXX");
    if (!mkdtemp(d->base)) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(d->models, sizeof(d->models), "%s/models", d->base);
    snprintf(d->input, sizeof(d->input), "%s/input", d->base);
    snprintf(d->output, sizeof(d->output), "%s/output", d->base);
    snprintf(d->temp, sizeof(d->temp), "%s/temp", d->base);
    mkdir(d->models, 0755);
    mkdir(d->input, 0755);
    mkdir(d->output, 0755);
    mkdir(d->temp, 0755);
}

static inline void tdirs_remove(struct tdirs *d)
{
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->base);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", d->base);
}

static inline struct graph_ctx *tgraph_new(const struct tdirs *d, enum graph_cache_mode mode, int lru)
{
    struct graph_config cfg = {0};
    cfg.base_dir = d->base;
    cfg.models_dir = d->models;
    cfg.input_dir = d->input;
    cfg.output_dir = d->output;
    cfg.temp_dir = d->temp;
    cfg.cache_mode = mode;
    cfg.cache_lru_size = lru;
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    cfg.mm = &mc;
    struct err e = {0};
    struct graph_ctx *g = graph_new(&cfg, &e);
    if (!g) {
        fprintf(stderr, "graph_new: %s\n", e.msg);
        exit(1);
    }
    return g;
}

/* ---- the fake event sink ---- */

#define SINK_MAX 4096
struct sink {
    int n;
    char *type[SINK_MAX];
    cJSON *data[SINK_MAX];
    int previews;
};

static inline void sink_send(void *user, const char *type, cJSON *data)
{
    struct sink *s = user;
    if (s->n < SINK_MAX) {
        s->type[s->n] = strdup(type);
        s->data[s->n] = data;
        s->n++;
    } else {
        cJSON_Delete(data);
    }
}

static inline void sink_preview(void *user, int image_type, const void *bytes, size_t n, const char *node_id,
                         const char *prompt_id)
{
    (void)image_type;
    (void)bytes;
    (void)n;
    (void)node_id;
    (void)prompt_id;
    ((struct sink *)user)->previews++;
}

static inline void sink_clear(struct sink *s)
{
    for (int i = 0; i < s->n; i++) {
        free(s->type[i]);
        cJSON_Delete(s->data[i]);
    }
    s->n = 0;
    s->previews = 0;
}

/* Compact "type:node" trace of the events (progress_state omitted). */
static inline void sink_trace(const struct sink *s, char *out, size_t cap)
{
    out[0] = '\0';
    size_t len = 0;
    for (int i = 0; i < s->n; i++) {
        if (!strcmp(s->type[i], "progress_state"))
            continue;
        const cJSON *node = cJSON_GetObjectItem(s->data[i], "node");
        char item[128];
        snprintf(item, sizeof(item), "%s%s%s", len ? " " : "", s->type[i],
                 cJSON_IsString(node) ? ":" : "");
        if (cJSON_IsString(node))
            snprintf(item + strlen(item), sizeof(item) - strlen(item), "%s", node->valuestring);
        size_t k = strlen(item);
        if (len + k + 1 < cap) {
            memcpy(out + len, item, k + 1);
            len += k;
        }
    }
}

static inline int sink_count(const struct sink *s, const char *type)
{
    int c = 0;
    for (int i = 0; i < s->n; i++)
        c += !strcmp(s->type[i], type);
    return c;
}

static inline const cJSON *sink_find(const struct sink *s, const char *type)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->type[i], type))
            return s->data[i];
    return NULL;
}

/* Run a prompt given as JSON text (validated first; exits on invalid). */
static inline enum graph_status trun(struct graph_ctx *g, struct sink *s, const char *id, const char *text,
                              const char *extra, cJSON **out_outputs)
{
    cJSON *prompt = graph_json_parse(text, strlen(text));
    struct graph_validation v;
    graph_validate(g, prompt, &v);
    if (!v.ok) {
        char *e = cJSON_PrintUnformatted(v.error);
        char *ne = cJSON_PrintUnformatted(v.node_errors);
        fprintf(stderr, "prompt invalid: %s %s\n", e, ne);
        exit(1);
    }
    cJSON *ex = extra ? cJSON_Parse(extra) : NULL;
    struct graph_job job = {.prompt_id = id, .prompt = prompt, .native = v.prompt,
                            .extra_data = ex, .outputs_to_execute = v.outputs};
    struct graph_events ev = {.user = s, .send = sink_send, .preview = sink_preview};
    struct graph_result r;
    graph_execute(g, &job, &ev, &r);
    enum graph_status st = r.status;
    if (out_outputs)
        *out_outputs = cJSON_Duplicate(r.outputs, 1);
    graph_result_release(&r);
    graph_validation_release(&v);
    cJSON_Delete(ex);
    cJSON_Delete(prompt);
    return st;
}

#endif
