/*
 * The core API routes (comfy-api.md §3.1-3.6, 3.9-3.11): parse, call down, format.
 * No graph or model work happens here: validation is graph_validate, execution is the
 * executor thread's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/sysinfo.h>
#include <time.h>

#include "buf.h"
#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "pynum.h"
#include "srv_fs.h"
#include "srv_req.h"
#include "uuid.h"

/* ---- helpers ------------------------------------------------------------------------- */

/* Python truthiness of a JSON value. */
static int py_truthy(const cJSON *v)
{
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v))
        return 0;
    if (cJSON_IsNumber(v))
        return v->valuedouble != 0;
    if (cJSON_IsString(v))
        return v->valuestring[0] != 0;
    if (cJSON_IsArray(v) || cJSON_IsObject(v))
        return v->child != NULL;
    return 1;
}

/* repr(float(v)) as a new string; caller xfrees. */
static char *pyfloat_text(double v)
{
    struct buf b;
    buf_init(&b);
    pynum_format_float(v, &b);
    return buf_detach(&b, NULL);
}

/* str(x) of a JSON value, for client-supplied prompt ids. */
static char *py_str(const cJSON *v)
{
    char tmp[64];
    if (cJSON_IsString(v))
        return xstrdup(v->valuestring);
    if (cJSON_IsBool(v))
        return xstrdup(cJSON_IsTrue(v) ? "True" : "False");
    if (cJSON_IsNull(v))
        return xstrdup("None");
    if (cJSON_IsNumber(v)) {
        /* cJSON cannot tell 5 from 5.0; integral values print as Python ints. */
        if (v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e15) {
            snprintf(tmp, sizeof(tmp), "%.0f", v->valuedouble);
            return xstrdup(tmp);
        }
        return pyfloat_text(v->valuedouble);
    }
    char *p = cJSON_PrintUnformatted(v);
    char *s = xstrdup(p);
    cJSON_free(p);
    return s;
}

static char *json_text(const cJSON *j)
{
    char *p = cJSON_PrintUnformatted(j);
    char *s = xstrdup(p);
    cJSON_free(p);
    return s;
}

static int parse_long(const char *s, long *out)
{
    char *end;
    if (!s || !*s)
        return -1;
    long v = strtol(s, &end, 10);
    if (*end)
        return -1;
    *out = v;
    return 0;
}

static void broadcast_count(void *user, int remaining)
{
    struct srv *s = user;
    cJSON *d = cJSON_CreateObject();
    cJSON *st = cJSON_AddObjectToObject(d, "status");
    cJSON *ei = cJSON_AddObjectToObject(st, "exec_info");
    cJSON_AddNumberToObject(ei, "queue_remaining", remaining);
    srv_ws_send(s->ws, NULL, "status", d);
}

void srv_broadcast_status(struct srv *s)
{
    srv_emit_status(s);
}

/* ---- POST /prompt ---------------------------------------------------------------------- */

static void route_prompt_post(struct srv_req *r)
{
    struct srv *s = r->srv;
    /* graph_json_parse keeps 64-bit seeds exact (cJSON alone would round them). */
    int empty = 1;
    for (size_t i = 0; i < r->body.len && empty; i++)
        empty = r->body.ptr[i] && strchr(" \t\r\n", r->body.ptr[i]) != NULL;
    cJSON *body = empty ? NULL : graph_json_parse(r->body.ptr, r->body.len);
    struct graph_validation v = {0};
    struct srv_job *job = NULL;
    if (!cJSON_IsObject(body)) {
        resp_error(r, 400, "invalid_json", empty ? "No prompt provided"
                                                  : "request body is not a JSON object");
        goto out;
    }
    /* The number is picked before anything is checked, as ComfyUI does (§3.1). */
    char number_text[64];
    double number;
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(body, "number");
    if (jn) {
        char *end = NULL;
        if (cJSON_IsNumber(jn))
            number = jn->valuedouble;
        else if (cJSON_IsRaw(jn)) /* a huge integer literal kept by graph_json_parse */
            number = strtod(jn->valuestring, NULL);
        else if (cJSON_IsString(jn) && (number = strtod(jn->valuestring, &end), end && !*end &&
                                        end != jn->valuestring))
            ;
        else {
            resp_error(r, 400, "invalid_prompt", "'number' must be a number");
            goto out;
        }
        if (!isfinite(number)) {
            resp_error(r, 400, "invalid_prompt", "'number' must be finite");
            goto out;
        }
        char *t = pyfloat_text(number);
        snprintf(number_text, sizeof(number_text), "%s", t);
        xfree(t);
    } else {
        int64_t n = srv_jobs_take_number(s,
                                         py_truthy(cJSON_GetObjectItemCaseSensitive(body, "front")));
        number = (double)n;
        snprintf(number_text, sizeof(number_text), "%lld", (long long)n);
    }
    cJSON *prompt = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    if (!prompt) {
        resp_error(r, 400, "no_prompt", "No prompt provided");
        goto out;
    }
    if (!cJSON_IsObject(prompt)) {
        resp_error(r, 400, "invalid_prompt", "'prompt' must be an object of nodes");
        goto out;
    }
    srv_jobs_fetch_inputs(s, prompt); /* an upload made through another process */
    const cJSON *targets = cJSON_GetObjectItemCaseSensitive(body, "partial_execution_targets");
    if (graph_validate_targets(s->graph, prompt, cJSON_IsArray(targets) ? targets : NULL, &v) < 0) {
        resp_error(r, 500, "internal_error", "validation failed internally");
        goto out;
    }
    if (!v.ok) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "error", v.error ? v.error : cJSON_CreateObject());
        cJSON_AddItemToObject(o, "node_errors", v.node_errors ? v.node_errors : cJSON_CreateObject());
        v.error = v.node_errors = NULL;
        resp_json(r, 400, o);
        goto out;
    }

    job = xcalloc(1, sizeof(*job));
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(body, "prompt_id");
    if (pid && !cJSON_IsNull(pid)) {
        job->prompt_id = py_str(pid);
    } else {
        char id[40];
        uuid4_format(id, 1);
        job->prompt_id = xstrdup(id);
    }
    job->number = number;
    job->number_text = xstrdup(number_text);
    job->prompt = cJSON_DetachItemFromObjectCaseSensitive(body, "prompt");
    job->native = v.prompt; /* validation's native form of the same (detached) JSON */
    v.prompt = NULL;
    cJSON *extra = cJSON_DetachItemFromObjectCaseSensitive(body, "extra_data");
    if (!cJSON_IsObject(extra)) {
        cJSON_Delete(extra);
        extra = cJSON_CreateObject();
    }
    cJSON *cid = cJSON_GetObjectItemCaseSensitive(body, "client_id");
    if (cid) {
        cJSON_DeleteItemFromObjectCaseSensitive(extra, "client_id");
        cJSON_AddItemToObject(extra, "client_id", cJSON_Duplicate(cid, 1));
        if (cJSON_IsString(cid) && cid->valuestring[0])
            job->client_id = xstrdup(cid->valuestring);
    }
    if (!cid) {
        /* ComfyUI routes by extra_data.client_id, so one sent only there counts too. */
        const cJSON *ec = cJSON_GetObjectItemCaseSensitive(extra, "client_id");
        if (cJSON_IsString(ec) && ec->valuestring[0])
            job->client_id = xstrdup(ec->valuestring);
    }
    job->extra_data = extra;
    job->outputs = v.outputs ? v.outputs : cJSON_CreateArray();
    v.outputs = NULL;

    struct srv_store_job sj = {
        .prompt_id = job->prompt_id,
        .number = job->number,
        .number_text = job->number_text,
        .prompt = json_text(job->prompt),
        .extra_data = json_text(job->extra_data),
        .outputs_to_execute = json_text(job->outputs),
        .client_id = job->client_id,
        /* Only a shared store schedules by them (model affinity); SQLite ignores them. */
        .models = job->native && srv_store_shared(s->store) ? graph_prompt_model_files(job->native)
                                                             : NULL,
    };
    struct err e = {0};
    int rc = srv_store_add(s->store, &sj, &e);
    xfree(sj.prompt);
    xfree(sj.extra_data);
    xfree(sj.outputs_to_execute);
    xfree(sj.models);
    if (rc < 0) {
        resp_error(r, 500, "internal_error", "%s", e.msg);
        goto out;
    }
    job->row_id = sj.id;
    cJSON *resp = cJSON_CreateObject();
    cJSON_AddStringToObject(resp, "prompt_id", job->prompt_id);
    cJSON_AddRawToObject(resp, "number", job->number_text);
    cJSON_AddItemToObject(resp, "node_errors", v.node_errors ? v.node_errors : cJSON_CreateObject());
    v.node_errors = NULL;
    log_debug("prompt '%s' queued (number %s)", job->prompt_id, job->number_text);
    /* A shared store has published the status already, in the job's own transaction; the
     * job itself runs wherever a worker claims it. */
    if (!srv_store_shared(s->store)) {
        srv_queue_push(&s->queue, job, broadcast_count, s); /* status before any run event */
        job = NULL;
    }
    resp_json(r, 200, resp);
out:
    srv_job_free(job);
    graph_validation_release(&v);
    cJSON_Delete(body);
}

static void route_prompt_get(struct srv_req *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *ei = cJSON_AddObjectToObject(o, "exec_info");
    cJSON_AddNumberToObject(ei, "queue_remaining", srv_jobs_remaining(r->srv));
    resp_json(r, 200, o);
}

/* ---- queue, interrupt, free ------------------------------------------------------------- */

static void route_queue_get(struct srv_req *r)
{
    resp_json(r, 200, srv_jobs_queue_json(r->srv));
}

/* A JSON object body, or {} for an empty one; NULL (and a 400 set) when malformed. */
static cJSON *body_object_or_empty(struct srv_req *r)
{
    int empty;
    cJSON *b = req_json(r, &empty);
    if (empty)
        return cJSON_CreateObject();
    if (!cJSON_IsObject(b)) {
        cJSON_Delete(b);
        resp_error(r, 400, "invalid_json", "request body must be a JSON object");
        return NULL;
    }
    return b;
}

static void route_queue_post(struct srv_req *r)
{
    struct srv *s = r->srv;
    cJSON *b = body_object_or_empty(r);
    if (!b)
        return;
    const cJSON *del = cJSON_GetObjectItemCaseSensitive(b, "delete");
    int clear = py_truthy(cJSON_GetObjectItemCaseSensitive(b, "clear"));
    if (clear || cJSON_IsArray(del))
        srv_jobs_remove(s, clear, cJSON_IsArray(del) ? del : NULL);
    cJSON_Delete(b);
    resp_empty(r, 200);
}

static void route_interrupt(struct srv_req *r)
{
    struct srv *s = r->srv;
    int empty;
    cJSON *b = req_json(r, &empty); /* body optional; malformed JSON counts as {} */
    const cJSON *pid = cJSON_IsObject(b) ? cJSON_GetObjectItemCaseSensitive(b, "prompt_id") : NULL;
    char *want = pid && !cJSON_IsNull(pid) ? py_str(pid) : NULL;
    srv_jobs_interrupt(s, want);
    xfree(want);
    cJSON_Delete(b);
    resp_empty(r, 200);
}

static void route_free(struct srv_req *r)
{
    struct srv *s = r->srv;
    int empty;
    cJSON *b = req_json(r, &empty); /* stable-canvas posts no body: {} */
    const cJSON *fm = cJSON_IsObject(b) ? cJSON_GetObjectItemCaseSensitive(b, "free_memory") : NULL;
    const cJSON *um = cJSON_IsObject(b) ? cJSON_GetObjectItemCaseSensitive(b, "unload_models") : NULL;
    int free_mem = py_truthy(fm);
    int unload = um ? py_truthy(um) : free_mem;
    if (unload || free_mem) {
        if (unload)
            atomic_store(&s->free_unload, 1);
        if (free_mem)
            atomic_store(&s->free_memory, 1);
        atomic_store(&s->free_pending, 1);
        srv_queue_wake(&s->queue); /* the executor applies it when idle */
    }
    cJSON_Delete(b);
    resp_empty(r, 200);
}

/* ---- history ----------------------------------------------------------------------------- */

static void route_history_get(struct srv_req *r)
{
    long max_items = -1, offset = -1;
    const char *mi = req_query(r, "max_items"), *of = req_query(r, "offset");
    if (mi && parse_long(mi, &max_items) < 0) {
        resp_error(r, 400, "invalid_query", "max_items must be an integer, got '%s'", mi);
        return;
    }
    if (of && parse_long(of, &offset) < 0) {
        resp_error(r, 400, "invalid_query", "offset must be an integer, got '%s'", of);
        return;
    }
    if (max_items < -1)
        max_items = -1;
    if (of && offset < 0)
        offset = 0;
    resp_json(r, 200, srv_store_history(r->srv->store, max_items, of ? offset : -1));
}

static void route_history_one(struct srv_req *r)
{
    resp_json(r, 200, srv_store_history_one(r->srv->store, r->segs[1]));
}

static void route_history_post(struct srv_req *r)
{
    struct srv *s = r->srv;
    cJSON *b = body_object_or_empty(r);
    if (!b)
        return;
    if (py_truthy(cJSON_GetObjectItemCaseSensitive(b, "clear")))
        srv_store_history_clear(s->store);
    const cJSON *del = cJSON_GetObjectItemCaseSensitive(b, "delete");
    const cJSON *it;
    if (cJSON_IsArray(del))
        cJSON_ArrayForEach(it, del)
        {
            if (cJSON_IsString(it))
                srv_store_history_delete(s->store, it->valuestring);
        }
    cJSON_Delete(b);
    resp_empty(r, 200);
}

/* ---- object_info, system_stats, features ---------------------------------------------------- */

static void route_object_info(struct srv_req *r)
{
    char *text = graph_object_info_json(r->srv->graph, r->n_segs > 1 ? r->segs[1] : NULL);
    if (!text) {
        resp_error(r, 500, "internal_error", "object_info is unavailable");
        return;
    }
    resp_json_text(r, 200, text);
}

static long long meminfo_kb(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[256];
    long long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = atoll(line + kl + 1);
            break;
        }
    fclose(f);
    return v;
}

/*
 * /system_stats is polled by every UI and SDK; reading /proc/meminfo and the device's
 * memory counters on each call is most of its cost. The formatted answer is reused for
 * STATS_TTL_MS, so figures are at most that old (memory changes slower than clients poll).
 */
#define STATS_TTL_MS 250
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static char *stats_text;     /* owned (xmalloc); guarded by stats_lock */
static int64_t stats_at_ms;  /* monotonic ms of stats_text */

static char *system_stats_text(struct srv *s);

static void route_system_stats(struct srv_req *r)
{
    int64_t now = clock_mono_ms();
    char *text = NULL;
    pthread_mutex_lock(&stats_lock);
    if (stats_text && now - stats_at_ms < STATS_TTL_MS)
        text = xstrdup(stats_text);
    pthread_mutex_unlock(&stats_lock);
    if (!text) {
        text = system_stats_text(r->srv);
        pthread_mutex_lock(&stats_lock);
        xfree(stats_text);
        stats_text = xstrdup(text);
        stats_at_ms = now;
        pthread_mutex_unlock(&stats_lock);
    }
    resp_json_text(r, 200, text);
}

static char *system_stats_text(struct srv *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *sys = cJSON_AddObjectToObject(o, "system");
    cJSON_AddStringToObject(sys, "os", "posix");
    long long total = meminfo_kb("MemTotal"), avail = meminfo_kb("MemAvailable");
    cJSON_AddNumberToObject(sys, "ram_total", total > 0 ? (double)total * 1024 : 0);
    cJSON_AddNumberToObject(sys, "ram_free", avail > 0 ? (double)avail * 1024 : 0);
    cJSON_AddStringToObject(sys, "comfyui_version", "0.3.64");
    cJSON_AddStringToObject(sys, "required_frontend_version", "1.27.10");
    cJSON_AddNullToObject(sys, "installed_templates_version");
    cJSON_AddStringToObject(sys, "required_templates_version", "0.1.95");
    cJSON_AddStringToObject(sys, "python_version", "latentd 0.1.0 (C11, no Python)");
    cJSON_AddStringToObject(sys, "pytorch_version", "none");
    cJSON_AddBoolToObject(sys, "embedded_python", 0);
    cJSON *argv = cJSON_AddArrayToObject(sys, "argv");
    for (int i = 0; i < s->cfg->argc; i++)
        cJSON_AddItemToArray(argv, cJSON_CreateString(s->cfg->argv[i]));
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    cJSON *d = graph_device_stats(s->graph);
    if (d)
        cJSON_AddItemToArray(devs, d);
    /* latentd: every live process on a shared store, beside ComfyUI's own fields. */
    cJSON *workers = srv_jobs_workers(s);
    if (workers)
        cJSON_AddItemToObject(o, "workers", workers);
    char *p = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    char *text = xstrdup(p);
    cJSON_free(p);
    return text;
}

static void route_features(struct srv_req *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "supports_preview_metadata", 1);
    cJSON_AddNumberToObject(o, "max_upload_size", (double)r->srv->cfg->max_upload_bytes);
    resp_json(r, 200, o);
}

static void route_empty_object(struct srv_req *r)
{
    resp_json(r, 200, cJSON_CreateObject());
}

static void route_empty_array(struct srv_req *r)
{
    resp_json(r, 200, cJSON_CreateArray());
}

static void route_ws_plain(struct srv_req *r)
{
    /* /ws reached the HTTP side: no Upgrade header (aiohttp answers 400 too). */
    resp_error(r, 400, "bad_request", "expected a WebSocket upgrade request");
}

/* ---- model folders ---------------------------------------------------------------------------- */

const char *const srv_model_folders[] = {
    "checkpoints", "configs", "loras", "vae", "text_encoders", "diffusion_models", "clip_vision",
    "style_models", "embeddings", "diffusers", "vae_approx", "controlnet", "gligen",
    "upscale_models", "custom_nodes", "hypernetworks", "photomaker", "classifiers",
    "model_patches", "audio_encoders", NULL,
};

static char *join2(const char *a, const char *b)
{
    struct buf s;
    buf_init(&s);
    buf_printf(&s, "%s/%s", a, b);
    return buf_detach(&s, NULL);
}

char **srv_model_folder_dirs(const struct srv_config *cfg, const char *folder)
{
    int known = 0;
    for (int i = 0; srv_model_folders[i]; i++)
        if (strcmp(srv_model_folders[i], folder) == 0)
            known = 1;
    if (!known)
        return NULL;
    char **v = xcalloc(3, sizeof(*v));
    if (strcmp(folder, "custom_nodes") == 0) {
        v[0] = join2(cfg->base_dir, "custom_nodes");
    } else if (strcmp(folder, "text_encoders") == 0) {
        v[0] = join2(cfg->models_dir, "text_encoders");
        v[1] = join2(cfg->models_dir, "clip"); /* legacy folder name, still searched */
    } else if (strcmp(folder, "diffusion_models") == 0) {
        v[0] = join2(cfg->models_dir, "unet");
        v[1] = join2(cfg->models_dir, "diffusion_models");
    } else if (strcmp(folder, "controlnet") == 0) {
        v[0] = join2(cfg->models_dir, "controlnet");
        v[1] = join2(cfg->models_dir, "t2i_adapter");
    } else {
        v[0] = join2(cfg->models_dir, folder);
    }
    return v;
}

void srv_strv_free(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        xfree(*p);
    xfree(v);
}

int srv_model_ext_ok(const char *folder, const char *name)
{
    static const char *const model_ext[] = {".ckpt", ".pt", ".pt2", ".bin", ".pth",
                                            ".safetensors", ".pkl", ".sft", NULL};
    const char *dot = strrchr(name, '.');
    if (!dot)
        return 0;
    if (strcmp(folder, "configs") == 0)
        return strcmp(dot, ".yaml") == 0;
    if (strcmp(folder, "custom_nodes") == 0)
        return 1;
    for (int i = 0; model_ext[i]; i++)
        if (strcmp(dot, model_ext[i]) == 0)
            return 1;
    return 0;
}

/* Files of a model folder: sorted, unique, relative. */
static void model_files(const struct srv_config *cfg, const char *folder, char **dirs,
                        struct srv_fs_list *out)
{
    for (char **d = dirs; *d; d++)
        srv_fs_walk(*d, 1, 0, out);
    size_t k = 0;
    for (size_t i = 0; i < out->n; i++) {
        if (srv_model_ext_ok(folder, out->v[i].rel))
            out->v[k++] = out->v[i];
        else
            xfree(out->v[i].rel);
    }
    out->n = k;
    srv_fs_list_sort(out);
}

static void route_models(struct srv_req *r)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; srv_model_folders[i]; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(srv_model_folders[i]));
    resp_json(r, 200, a);
}

static void route_models_folder(struct srv_req *r)
{
    const char *folder = r->segs[1];
    char **dirs = srv_model_folder_dirs(r->srv->cfg, folder);
    if (!dirs || strcmp(folder, "custom_nodes") == 0) {
        srv_strv_free(dirs);
        resp_empty(r, 404);
        return;
    }
    struct srv_fs_list l = {0};
    model_files(r->srv->cfg, folder, dirs, &l);
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < l.n; i++)
        if (i == 0 || strcmp(l.v[i].rel, l.v[i - 1].rel) != 0)
            cJSON_AddItemToArray(a, cJSON_CreateString(l.v[i].rel));
    srv_fs_list_release(&l);
    srv_strv_free(dirs);
    resp_json(r, 200, a);
}

static void route_experiment_models(struct srv_req *r)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; srv_model_folders[i]; i++) {
        const char *f = srv_model_folders[i];
        if (strcmp(f, "configs") == 0 || strcmp(f, "custom_nodes") == 0)
            continue;
        char **dirs = srv_model_folder_dirs(r->srv->cfg, f);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", f);
        cJSON *fs = cJSON_AddArrayToObject(o, "folders");
        for (char **d = dirs; *d; d++)
            cJSON_AddItemToArray(fs, cJSON_CreateString(*d));
        cJSON_AddItemToArray(a, o);
        srv_strv_free(dirs);
    }
    resp_json(r, 200, a);
}

static void route_experiment_models_folder(struct srv_req *r)
{
    const char *folder = r->segs[2];
    char **dirs = srv_model_folder_dirs(r->srv->cfg, folder);
    if (!dirs || strcmp(folder, "custom_nodes") == 0 || strcmp(folder, "configs") == 0) {
        srv_strv_free(dirs);
        resp_empty(r, 404);
        return;
    }
    cJSON *a = cJSON_CreateArray();
    for (int di = 0; dirs[di]; di++) {
        struct srv_fs_list l = {0};
        srv_fs_walk(dirs[di], 1, 0, &l);
        srv_fs_list_sort(&l);
        for (size_t i = 0; i < l.n; i++) {
            if (!srv_model_ext_ok(folder, l.v[i].rel))
                continue;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", l.v[i].rel);
            cJSON_AddNumberToObject(o, "pathIndex", di);
            cJSON_AddNumberToObject(o, "modified", (double)l.v[i].st.st_mtim.tv_sec +
                                                       l.v[i].st.st_mtim.tv_nsec / 1e9);
            cJSON_AddNumberToObject(o, "created", (double)l.v[i].st.st_ctim.tv_sec +
                                                      l.v[i].st.st_ctim.tv_nsec / 1e9);
            cJSON_AddNumberToObject(o, "size", (double)l.v[i].st.st_size);
            cJSON_AddItemToArray(a, o);
        }
        srv_fs_list_release(&l);
    }
    srv_strv_free(dirs);
    resp_json(r, 200, a);
}

static void route_embeddings(struct srv_req *r)
{
    char **dirs = srv_model_folder_dirs(r->srv->cfg, "embeddings");
    struct srv_fs_list l = {0};
    model_files(r->srv->cfg, "embeddings", dirs, &l);
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < l.n; i++) {
        char *dot = strrchr(l.v[i].rel, '.');
        if (dot)
            *dot = '\0';
        cJSON_AddItemToArray(a, cJSON_CreateString(l.v[i].rel));
    }
    srv_fs_list_release(&l);
    srv_strv_free(dirs);
    resp_json(r, 200, a);
}

/* safetensors: u64 little-endian header length, then the JSON header. */
static void route_view_metadata(struct srv_req *r)
{
    const char *folder = r->segs[1];
    const char *name = req_query(r, "filename");
    char **dirs = srv_model_folder_dirs(r->srv->cfg, folder);
    size_t nl = name ? strlen(name) : 0;
    if (!dirs || !name || nl < 12 || strcmp(name + nl - 12, ".safetensors") != 0 ||
        strstr(name, "..") || name[0] == '/') {
        srv_strv_free(dirs);
        resp_empty(r, 404);
        return;
    }
    cJSON *meta = NULL;
    for (char **d = dirs; *d && !meta; d++) {
        char *path = join2(*d, name);
        FILE *f = fopen(path, "rb");
        xfree(path);
        if (!f)
            continue;
        unsigned char len8[8];
        if (fread(len8, 1, 8, f) == 8) {
            uint64_t hl = 0;
            for (int i = 7; i >= 0; i--)
                hl = (hl << 8) | len8[i];
            if (hl > 0 && hl <= 1024 * 1024) {
                char *h = xmalloc(hl + 1);
                if (fread(h, 1, hl, f) == hl) {
                    cJSON *j = cJSON_ParseWithLength(h, hl);
                    cJSON *m = j ? cJSON_DetachItemFromObjectCaseSensitive(j, "__metadata__") : NULL;
                    cJSON_Delete(j);
                    meta = m;
                }
                xfree(h);
            }
        }
        fclose(f);
    }
    srv_strv_free(dirs);
    if (!meta) {
        resp_empty(r, 404);
        return;
    }
    resp_json(r, 200, meta);
}

/* ---- /internal ---------------------------------------------------------------------------------- */

static void route_logs(struct srv_req *r)
{
    /* No in-memory log ring yet: an empty terminal (comfy-api.md allows [] entries). */
    resp_json(r, 200, cJSON_CreateString(""));
}

static void route_logs_raw(struct srv_req *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddArrayToObject(o, "entries");
    cJSON *sz = cJSON_AddObjectToObject(o, "size");
    cJSON_AddNumberToObject(sz, "cols", 80);
    cJSON_AddNumberToObject(sz, "rows", 24);
    resp_json(r, 200, o);
}

static void route_logs_subscribe(struct srv_req *r)
{
    resp_empty(r, 200);
}

static void route_folder_paths(struct srv_req *r)
{
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; srv_model_folders[i]; i++) {
        char **dirs = srv_model_folder_dirs(r->srv->cfg, srv_model_folders[i]);
        cJSON *a = cJSON_AddArrayToObject(o, srv_model_folders[i]);
        for (char **d = dirs; *d; d++)
            cJSON_AddItemToArray(a, cJSON_CreateString(*d));
        srv_strv_free(dirs);
    }
    resp_json(r, 200, o);
}

static int mtime_desc(const void *a, const void *b)
{
    const struct srv_fs_entry *x = a, *y = b;
    if (x->st.st_mtim.tv_sec != y->st.st_mtim.tv_sec)
        return x->st.st_mtim.tv_sec < y->st.st_mtim.tv_sec ? 1 : -1;
    if (x->st.st_mtim.tv_nsec != y->st.st_mtim.tv_nsec)
        return x->st.st_mtim.tv_nsec < y->st.st_mtim.tv_nsec ? 1 : -1;
    return strcmp(x->rel, y->rel);
}

static void route_internal_files(struct srv_req *r)
{
    const struct srv_config *cfg = r->srv->cfg;
    const char *t = r->segs[2];
    const char *dir = strcmp(t, "output") == 0  ? cfg->output_dir
                      : strcmp(t, "input") == 0 ? cfg->input_dir
                      : strcmp(t, "temp") == 0  ? cfg->temp_dir
                                                : NULL;
    if (!dir) {
        resp_error(r, 400, "invalid_type", "unknown directory type '%s'", t);
        return;
    }
    struct srv_fs_list l = {0};
    srv_fs_walk(dir, 0, 0, &l);
    if (l.n)
        qsort(l.v, l.n, sizeof(*l.v), mtime_desc);
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < l.n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(l.v[i].rel));
    srv_fs_list_release(&l);
    resp_json(r, 200, a);
}

const struct srv_route srv_routes_core[] = {
    {"/prompt", SRV_POST, route_prompt_post, 0},
    {"/prompt", SRV_GET, route_prompt_get, 0},
    {"/queue", SRV_GET, route_queue_get, 0},
    {"/queue", SRV_POST, route_queue_post, 0},
    {"/interrupt", SRV_POST, route_interrupt, 0},
    {"/free", SRV_POST, route_free, 0},
    {"/history", SRV_GET, route_history_get, 0},
    {"/history", SRV_POST, route_history_post, 0},
    {"/history/*", SRV_GET, route_history_one, 0},
    {"/object_info", SRV_GET, route_object_info, 0},
    {"/object_info/*", SRV_GET, route_object_info, 0},
    {"/system_stats", SRV_GET, route_system_stats, 0},
    {"/features", SRV_GET, route_features, 0},
    {"/embeddings", SRV_GET, route_embeddings, 0},
    {"/extensions", SRV_GET, route_empty_array, 0},
    {"/models", SRV_GET, route_models, 0},
    {"/models/*", SRV_GET, route_models_folder, 0},
    {"/experiment/models", SRV_GET, route_experiment_models, 0},
    {"/experiment/models/*", SRV_GET, route_experiment_models_folder, 0},
    {"/view_metadata/*", SRV_GET, route_view_metadata, 0},
    {"/workflow_templates", SRV_GET, route_empty_object, 0},
    {"/i18n", SRV_GET, route_empty_object, 0},
    {"/ws", SRV_GET, route_ws_plain, 0},
    {"/internal/logs", SRV_GET, route_logs, 1},
    {"/internal/logs/raw", SRV_GET, route_logs_raw, 1},
    {"/internal/logs/subscribe", SRV_PATCH, route_logs_subscribe, 1},
    {"/internal/folder_paths", SRV_GET, route_folder_paths, 1},
    {"/internal/files/*", SRV_GET, route_internal_files, 1},
    {NULL, 0, NULL, 0},
};
