/*
 * graph_mmjson.c — the memory manager's per-node reports (struct mm_report) as the
 * JSON of a history entry's meta "memory" array. This is the one place they become
 * JSON: memory/ hands over structs, and nothing parses this text back.
 *
 * Sizes are bytes, times ms rounded to 3 decimals (the precision /history has always
 * shown), keys in the order clients have seen since the array was added.
 */
#include <stdio.h>
#include <stdlib.h>

#include "graph_internal.h"
#include "memmgr.h"

/* A time in ms as "%.3f" prints it, so that the JSON shows 3 decimals at most. */
static double ms3(double ms)
{
    char t[64];
    snprintf(t, sizeof(t), "%.3f", ms);
    return strtod(t, NULL);
}

static cJSON *model_json(const struct mm_model_plan *m)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", m->name);
    cJSON_AddNumberToObject(o, "layers", m->layers);
    cJSON_AddNumberToObject(o, "layers_resident", m->layers_resident);
    cJSON_AddNumberToObject(o, "layers_streamed", m->layers_streamed);
    cJSON_AddNumberToObject(o, "bytes_resident", (double)m->bytes_resident);
    cJSON_AddNumberToObject(o, "bytes_streamed", (double)m->bytes_streamed);
    cJSON_AddNumberToObject(o, "ring_slots", m->ring_slots);
    cJSON_AddNumberToObject(o, "ring_bytes", (double)m->ring_bytes);
    cJSON_AddNumberToObject(o, "prefetch", m->prefetch);
    return o;
}

static cJSON *report_json(const struct mm_report *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "device", r->device);
    cJSON_AddNumberToObject(o, "budget", (double)r->budget);
    cJSON_AddNumberToObject(o, "activation_bytes", (double)r->activation_bytes);
    cJSON_AddNumberToObject(o, "workspace_bytes", (double)r->workspace_bytes);
    cJSON_AddNumberToObject(o, "patch_workspace_bytes", (double)r->patch_workspace_bytes);
    cJSON_AddNumberToObject(o, "bytes_unloaded", (double)r->bytes_unloaded);
    cJSON_AddNumberToObject(o, "models_unloaded", r->models_unloaded);
    cJSON_AddNumberToObject(o, "bytes_resident", (double)r->bytes_resident);
    cJSON_AddNumberToObject(o, "bytes_streamed", (double)r->bytes_streamed);
    cJSON_AddNumberToObject(o, "bytes_loaded", (double)r->bytes_loaded);
    cJSON_AddNumberToObject(o, "bytes_copied", (double)r->bytes_copied);
    cJSON_AddNumberToObject(o, "peak_bytes", (double)r->peak_bytes);
    cJSON_AddNumberToObject(o, "predicted_ms", ms3(r->predicted_ms));
    cJSON_AddNumberToObject(o, "load_ms", ms3(r->load_ms));
    cJSON_AddNumberToObject(o, "measured_ms", ms3(r->measured_ms));
    cJSON_AddNumberToObject(o, "passes", r->passes);
    cJSON_AddNumberToObject(o, "measured_pass_ms", ms3(r->measured_pass_ms));
    cJSON_AddBoolToObject(o, "retried", r->retried);
    cJSON *models = cJSON_AddArrayToObject(o, "models");
    for (int i = 0; i < r->n_models; i++)
        cJSON_AddItemToArray(models, model_json(&r->models[i]));
    return o;
}

cJSON *graph__mm_reports_json(const struct mm_report *r, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, report_json(&r[i]));
    return a;
}
