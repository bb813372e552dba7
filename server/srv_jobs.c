/*
 * srv_jobs — the queue wherever it lives. With a store one process owns (SQLite) the
 * queue is srv_queue in memory and events go straight to this process's WebSocket hub.
 * With a shared store (PostgreSQL) the queue is the database: numbers come from its
 * sequence, the executor claims rows, /queue and the counts read the table, and events
 * are published to it and come back through the store's watch thread to every process,
 * which hands each to its own WebSocket clients (a client's sid is only connected to one).
 * Routes and the executor call these instead of choosing themselves.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "afile.h"
#include "alloc.h"
#include "buf.h"
#include "log.h"
#include "srv.h"
#include "srv_fs.h"
#include "srv_path.h"

#define CLAIM_POLL_MS 1000 /* a missed NOTIFY costs at most this */

static int shared(const struct srv *s)
{
    return s->store && srv_store_shared(s->store); /* unit tests run the hub storeless */
}

int64_t srv_jobs_take_number(struct srv *s, int front)
{
    if (shared(s))
        return s->store->ops->take_number(s->store->ctx, front);
    return srv_queue_take_number(&s->queue, front);
}

int srv_jobs_remaining(struct srv *s)
{
    if (shared(s))
        return s->store->ops->remaining(s->store->ctx);
    return srv_queue_remaining(&s->queue);
}

cJSON *srv_jobs_queue_json(struct srv *s)
{
    if (shared(s))
        return s->store->ops->queue_json(s->store->ctx);
    return srv_queue_json(&s->queue);
}

void srv_jobs_remove(struct srv *s, int clear, const cJSON *ids)
{
    if (shared(s)) {
        s->store->ops->remove_pending(s->store->ctx, clear, ids); /* publishes status */
        return;
    }
    int64_t *rows = NULL;
    int n = srv_queue_remove(&s->queue, clear, ids, &rows);
    for (int i = 0; i < n; i++)
        srv_store_delete_pending(s->store, rows[i]);
    xfree(rows);
    srv_broadcast_status(s);
}

void srv_jobs_interrupt(struct srv *s, const char *prompt_id)
{
    if (shared(s)) {
        /* Cluster-wide: the worker running it hears it through its watch thread. */
        s->store->ops->interrupt(s->store->ctx, prompt_id);
        return;
    }
    char *running = prompt_id ? srv_queue_running_id(&s->queue) : NULL;
    if (!prompt_id || (running && strcmp(running, prompt_id) == 0))
        graph_interrupt(s->graph);
    xfree(running);
}

cJSON *srv_jobs_workers(struct srv *s)
{
    return shared(s) ? s->store->ops->workers(s->store->ctx) : NULL;
}

void srv_emit(struct srv *s, const char *sid, const char *type, cJSON *data)
{
    if (!shared(s)) {
        srv_ws_send(s->ws, sid, type, data);
        return;
    }
    char *text = data ? cJSON_PrintUnformatted(data) : NULL;
    s->store->ops->publish(s->store->ctx, sid, type, text ? text : "{}", NULL, 0);
    cJSON_free(text);
    cJSON_Delete(data);
}

void srv_emit_status(struct srv *s)
{
    if (shared(s)) {
        s->store->ops->publish(s->store->ctx, NULL, "status", NULL, NULL, 0);
        return;
    }
    cJSON *d = cJSON_CreateObject();
    cJSON *st = cJSON_AddObjectToObject(d, "status");
    cJSON *ei = cJSON_AddObjectToObject(st, "exec_info");
    cJSON_AddNumberToObject(ei, "queue_remaining", srv_queue_remaining(&s->queue));
    srv_ws_send(s->ws, NULL, "status", d);
}

void srv_emit_preview(struct srv *s, const char *sid, int image_type, const void *bytes,
                      size_t n, const char *node_id, const char *prompt_id)
{
    if (!shared(s)) {
        srv_ws_send_preview(s->ws, sid, image_type, bytes, n, node_id, prompt_id);
        return;
    }
    /* The image travels by reference: a row of the events table, not the NOTIFY. */
    cJSON *h = cJSON_CreateObject();
    cJSON_AddNumberToObject(h, "image_type", image_type);
    cJSON_AddStringToObject(h, "node_id", node_id ? node_id : "");
    cJSON_AddStringToObject(h, "prompt_id", prompt_id ? prompt_id : "");
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    s->store->ops->publish(s->store->ctx, sid, "preview", text, bytes, n);
    cJSON_free(text);
}

/* ---- the store's watch thread -> this process ------------------------------------------- */

static void hook_event(void *user, const char *sid, const char *type, const char *data,
                       const void *bytes, size_t n)
{
    struct srv *s = user;
    cJSON *d = cJSON_Parse(data);
    if (strcmp(type, "preview") == 0) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(d, "image_type");
        const cJSON *node = cJSON_GetObjectItemCaseSensitive(d, "node_id");
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(d, "prompt_id");
        srv_ws_send_preview(s->ws, sid, cJSON_IsNumber(it) ? it->valueint : 1, bytes, n,
                            cJSON_IsString(node) ? node->valuestring : NULL,
                            cJSON_IsString(pid) ? pid->valuestring : NULL);
        cJSON_Delete(d);
        return;
    }
    if (strcmp(type, "executing") == 0 && sid) {
        /* For the reconnect message (comfy-api §4.1), wherever the prompt runs. */
        const cJSON *node = cJSON_GetObjectItemCaseSensitive(d, "node");
        srv_ws_set_executing(s->ws, sid, cJSON_IsString(node) ? node->valuestring : NULL);
    }
    srv_ws_send(s->ws, sid, type, d);
}

static void hook_interrupt(void *user, int64_t id)
{
    struct srv *s = user;
    if (id && srv_queue_running_row(&s->queue) == id)
        graph_interrupt(s->graph);
}

static void hook_jobs(void *user)
{
    struct srv *s = user;
    if (!s->cfg->no_worker)
        srv_queue_wake(&s->queue);
}

int srv_jobs_start(struct srv *s, struct err *e)
{
    if (!shared(s))
        return 0;
    cJSON *dev = graph_device_stats(s->graph);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(dev, "name");
    struct srv_store_hooks h = {s, cJSON_IsString(name) ? name->valuestring : "?", hook_event,
                                hook_interrupt, hook_jobs};
    int rc = s->store->ops->watch(s->store->ctx, &h, e);
    cJSON_Delete(dev);
    return rc;
}

void srv_jobs_stop(struct srv *s)
{
    if (shared(s))
        s->store->ops->unwatch(s->store->ctx);
}

/* ---- files between processes ------------------------------------------------------------ */

static const char *type_root(const struct srv_config *cfg, const char *type)
{
    return strcmp(type, "output") == 0  ? cfg->output_dir
           : strcmp(type, "input") == 0 ? cfg->input_dir
           : strcmp(type, "temp") == 0  ? cfg->temp_dir
                                        : NULL;
}

/* Path of type/subfolder/name under its root, or NULL when it would leave the root. */
static char *file_path(struct srv *s, const char *type, const char *sub, const char *name)
{
    const char *root = type_root(s->cfg, type);
    if (!root || !srv_path_is_plain_name(name))
        return NULL;
    char *dir = srv_path_join_inside(root, sub && sub[0] ? sub : NULL);
    char *path = dir ? srv_path_join_inside(dir, name) : NULL;
    xfree(dir);
    return path;
}

int srv_jobs_share_file(struct srv *s, const char *type, const char *sub, const char *name)
{
    if (!shared(s))
        return 0;
    char *path = file_path(s, type, sub, name);
    struct buf b;
    buf_init(&b);
    int rc = path && buf_read_file(&b, path) == 0
                 ? s->store->ops->file_put(s->store->ctx, type, sub ? sub : "", name, b.ptr, b.len)
                 : ERR_NOT_FOUND;
    buf_release(&b);
    xfree(path);
    return rc;
}

int srv_jobs_fetch_file(struct srv *s, const char *type, const char *sub, const char *name)
{
    if (!shared(s))
        return ERR_NOT_FOUND;
    void *bytes = NULL;
    size_t n = 0;
    int rc = s->store->ops->file_get(s->store->ctx, type, sub ? sub : "", name, &bytes, &n);
    if (rc < 0)
        return rc;
    char *path = file_path(s, type, sub, name);
    struct err e = {0};
    if (path) {
        /* Kept as a local copy: the next /view of it is a plain file read. */
        char *dir = xstrdup(path);
        *strrchr(dir, '/') = '\0';
        srv_fs_mkdirs(dir, 0755);
        xfree(dir);
        rc = afile_write(path, bytes, n, &e);
    } else {
        rc = ERR_INVALID;
    }
    xfree(path);
    xfree(bytes);
    return rc;
}

/* Every {filename, subfolder, type} of a result's outputs goes to the store, so /view on
 * any process finds it. Called before the history row is written. */
void srv_jobs_share_outputs(struct srv *s, const cJSON *outputs)
{
    if (!shared(s) || !outputs)
        return;
    const cJSON *node, *list, *item;
    cJSON_ArrayForEach(node, outputs)
    {
        cJSON_ArrayForEach(list, node)
        {
            cJSON_ArrayForEach(item, list)
            {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(item, "filename");
                const cJSON *sf = cJSON_GetObjectItemCaseSensitive(item, "subfolder");
                const cJSON *ty = cJSON_GetObjectItemCaseSensitive(item, "type");
                if (cJSON_IsString(fn) && cJSON_IsString(ty))
                    srv_jobs_share_file(s, ty->valuestring,
                                        cJSON_IsString(sf) ? sf->valuestring : "",
                                        fn->valuestring);
            }
        }
    }
}

/* Inputs the prompt names ("image": "sub/name.png" [input]) that this machine lacks are
 * fetched from the store: an upload made through another process. */
void srv_jobs_fetch_inputs(struct srv *s, const cJSON *prompt)
{
    if (!shared(s))
        return;
    const cJSON *node, *in;
    cJSON_ArrayForEach(node, prompt)
    {
        cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(node, "inputs"))
        {
            if (!cJSON_IsString(in) || strcmp(in->string, "image") != 0)
                continue;
            char *rel = xstrdup(in->valuestring);
            char *tag = strstr(rel, " [");
            if (tag)
                *tag = '\0';
            char *slash = strrchr(rel, '/');
            const char *name = slash ? slash + 1 : rel;
            if (slash)
                *slash = '\0';
            char *path = file_path(s, "input", slash ? rel : "", name);
            struct stat st;
            if (path && stat(path, &st) < 0 && errno == ENOENT)
                srv_jobs_fetch_file(s, "input", slash ? rel : "", name);
            xfree(path);
            xfree(rel);
        }
    }
}

/* ---- the executor's next job ------------------------------------------------------------- */

static struct srv_job *job_from_store(struct srv_store_job *sj)
{
    struct srv_job *j = xcalloc(1, sizeof(*j));
    j->row_id = sj->id;
    j->prompt_id = sj->prompt_id;
    j->number = sj->number;
    j->number_text = sj->number_text;
    j->client_id = sj->client_id;
    sj->prompt_id = sj->number_text = sj->client_id = NULL;
    j->prompt = sj->prompt ? graph_json_parse(sj->prompt, strlen(sj->prompt)) : NULL;
    j->extra_data = sj->extra_data ? cJSON_Parse(sj->extra_data) : NULL;
    j->outputs = sj->outputs_to_execute ? cJSON_Parse(sj->outputs_to_execute) : NULL;
    return j;
}

/* Claim one job; NULL when there is none (or it was unreadable: then it is failed). */
static struct srv_job *claim(struct srv *s)
{
    struct srv_store_job sj = {0};
    if (s->store->ops->claim(s->store->ctx, &sj) <= 0)
        return NULL;
    struct srv_job *j = job_from_store(&sj);
    srv_store_job_release(&sj);
    if (!j->prompt || !j->extra_data || !j->outputs) {
        log_error("job store: claimed prompt '%s' is unreadable; failed", j->prompt_id);
        srv_store_finish(s->store, j->row_id, "error", "{}", "[]", "{}");
        srv_job_free(j);
        return NULL;
    }
    srv_jobs_fetch_inputs(s, j->prompt);
    return j;
}

struct srv_job *srv_jobs_next(struct srv *s)
{
    if (!shared(s))
        return srv_queue_wait_pop(&s->queue);
    for (;;) {
        struct srv_job *j = s->cfg->no_worker ? NULL : claim(s);
        if (j) {
            srv_queue_set_running(&s->queue, j);
            return j;
        }
        /* Woken (a NOTIFY, a deferred /free) or stopping: back to the executor's loop. */
        if (srv_queue_wait_wake(&s->queue, CLAIM_POLL_MS) != 0)
            return NULL;
    }
}
