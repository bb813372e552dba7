/*
 * The job store's front: picks a backend from the URL and forwards each call to its
 * table. Helpers both backends use (the messages of a job that never finished, secret
 * stripping) live here so the rule is written once.
 */
#include "srv_store.h"

#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "graph.h"

void srv_store_job_release(struct srv_store_job *j)
{
    xfree(j->prompt_id);
    xfree(j->number_text);
    xfree(j->prompt);
    xfree(j->extra_data);
    xfree(j->outputs_to_execute);
    xfree(j->client_id);
    xfree(j->models);
    memset(j, 0, sizeof(*j));
}

int srv_store_url_is_pg(const char *url)
{
    return url && (strncmp(url, "postgresql://", 13) == 0 || strncmp(url, "postgres://", 11) == 0);
}

struct srv_store *srv_store_open_opts(const char *url, const struct srv_store_options *o,
                                      struct err *e)
{
    int pg = srv_store_url_is_pg(url);
    void *ctx = pg ? srv_store__pg_open(url, o, e) : srv_store__sqlite_open(url, e);
    if (!ctx)
        return NULL;
    struct srv_store *st = xcalloc(1, sizeof(*st));
    st->ops = pg ? &srv_store__pg_ops : &srv_store__sqlite_ops;
    st->ctx = ctx;
    return st;
}

struct srv_store *srv_store_open(const char *url, struct err *e)
{
    struct srv_store_options o = {.worker = 1, .affinity_s = -1};
    return srv_store_open_opts(url, &o, e);
}

void srv_store_close(struct srv_store *st)
{
    if (!st)
        return;
    st->ops->close(st->ctx);
    xfree(st);
}

int srv_store_shared(const struct srv_store *st)
{
    return st->ops->claim != NULL;
}

int srv_store_add(struct srv_store *st, struct srv_store_job *j, struct err *e)
{
    return st->ops->add(st->ctx, j, e);
}

int srv_store_load_pending(struct srv_store *st, void (*fn)(void *user, struct srv_store_job *j),
                           void *user)
{
    return st->ops->load_pending ? st->ops->load_pending(st->ctx, fn, user) : 0;
}

int64_t srv_store_next_counter(struct srv_store *st)
{
    return st->ops->next_counter(st->ctx);
}

int srv_store_mark_running(struct srv_store *st, int64_t id)
{
    return st->ops->mark_running(st->ctx, id);
}

int srv_store_finish(struct srv_store *st, int64_t id, const char *status_str,
                     const char *outputs, const char *messages, const char *meta)
{
    return st->ops->finish(st->ctx, id, status_str, outputs, messages, meta);
}

int srv_store_delete_pending(struct srv_store *st, int64_t id)
{
    return st->ops->delete_pending(st->ctx, id);
}

cJSON *srv_store_history(struct srv_store *st, long max_items, long offset)
{
    return st->ops->history(st->ctx, max_items, offset);
}

cJSON *srv_store_history_one(struct srv_store *st, const char *prompt_id)
{
    return st->ops->history_one(st->ctx, prompt_id);
}

int srv_store_history_clear(struct srv_store *st)
{
    return st->ops->history_clear(st->ctx);
}

int srv_store_history_delete(struct srv_store *st, const char *prompt_id)
{
    return st->ops->history_delete(st->ctx, prompt_id);
}

long srv_store_history_count(struct srv_store *st)
{
    return st->ops->history_count(st->ctx);
}

char *srv_store__stopped_messages(const char *pid, int64_t started, const char *why)
{
    cJSON *msgs = cJSON_CreateArray();
    cJSON *m = cJSON_CreateArray();
    cJSON_AddItemToArray(m, cJSON_CreateString("execution_start"));
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "prompt_id", pid);
    cJSON_AddNumberToObject(d, "timestamp", (double)started);
    cJSON_AddItemToArray(m, d);
    cJSON_AddItemToArray(msgs, m);
    m = cJSON_CreateArray();
    cJSON_AddItemToArray(m, cJSON_CreateString("execution_error"));
    d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "prompt_id", pid);
    cJSON_AddNullToObject(d, "node_id");
    cJSON_AddNullToObject(d, "node_type");
    cJSON_AddItemToObject(d, "executed", cJSON_CreateArray());
    cJSON_AddStringToObject(d, "exception_message", why);
    cJSON_AddStringToObject(d, "exception_type", "RuntimeError");
    cJSON_AddItemToObject(d, "traceback", cJSON_CreateArray());
    cJSON_AddItemToObject(d, "current_inputs", cJSON_CreateObject());
    cJSON_AddItemToObject(d, "current_outputs", cJSON_CreateArray());
    cJSON_AddNumberToObject(d, "timestamp", (double)clock_wall_ms());
    cJSON_AddItemToArray(m, d);
    cJSON_AddItemToArray(msgs, m);
    char *text = cJSON_PrintUnformatted(msgs);
    cJSON_Delete(msgs);
    return text;
}

char *srv_store__strip_secrets(const char *extra)
{
    cJSON *x = extra ? cJSON_Parse(extra) : NULL;
    if (!x)
        return NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(x, "auth_token_comfy_org");
    cJSON_DeleteItemFromObjectCaseSensitive(x, "api_key_comfy_org");
    char *p = cJSON_PrintUnformatted(x);
    char *s = xstrdup(p);
    cJSON_free(p);
    cJSON_Delete(x);
    return s;
}

static cJSON *parse_or(const char *t, cJSON *(*dflt)(void))
{
    /* graph_json_parse keeps 64-bit seeds exact in the stored prompt. */
    cJSON *j = t ? graph_json_parse(t, strlen(t)) : NULL;
    return j ? j : dflt();
}

void srv_store__history_entry(cJSON *obj, const char *const col[9])
{
    const char *pid = col[0] ? col[0] : "";
    cJSON *entry = cJSON_CreateObject();
    cJSON *p = cJSON_CreateArray();
    cJSON_AddItemToArray(p, cJSON_CreateRaw(col[1] ? col[1] : "0"));
    cJSON_AddItemToArray(p, cJSON_CreateString(pid));
    cJSON_AddItemToArray(p, parse_or(col[2], cJSON_CreateObject));
    cJSON_AddItemToArray(p, parse_or(col[3], cJSON_CreateObject));
    cJSON_AddItemToArray(p, parse_or(col[4], cJSON_CreateArray));
    cJSON_AddItemToObject(entry, "prompt", p);
    cJSON_AddItemToObject(entry, "outputs", parse_or(col[6], cJSON_CreateObject));
    int success = col[5] && strcmp(col[5], "success") == 0;
    cJSON *st = cJSON_CreateObject();
    cJSON_AddStringToObject(st, "status_str", success ? "success" : "error");
    cJSON_AddBoolToObject(st, "completed", success);
    cJSON_AddItemToObject(st, "messages", parse_or(col[7], cJSON_CreateArray));
    cJSON_AddItemToObject(entry, "status", st);
    cJSON_AddItemToObject(entry, "meta", parse_or(col[8], cJSON_CreateObject));
    cJSON_DeleteItemFromObjectCaseSensitive(obj, pid);
    cJSON_AddItemToObject(obj, pid, entry);
}
