/*
 * The executor thread: pops jobs, runs graph_execute, routes its events to WebSocket
 * clients (comfy-api.md §4.3) and finishes each prompt in the order clients depend on
 * (§4.5): history written -> item leaves queue_running -> execution_success -> status ->
 * executing{node:null}. saintno's SDK checks /queue and then /history on every status
 * message, so the history row must exist before the item leaves the queue.
 * Deferred POST /free requests are applied here, between prompts.
 */
#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "srv.h"

struct exec_ctx {
    struct srv *srv;
    const struct srv_job *job;
};

/* Events that only the prompt's client receives; dropped when the prompt has none. */
static int client_only(const char *type)
{
    static const char *const t[] = {"execution_start", "execution_cached", "execution_success",
                                    "execution_error", "executing", "executed", NULL};
    for (int i = 0; t[i]; i++)
        if (strcmp(type, t[i]) == 0)
            return 1;
    return 0;
}

static void route_event(struct srv *s, const char *client, const char *type, cJSON *data)
{
    if (strcmp(type, "status") == 0) {
        srv_emit(s, NULL, type, data);
        return;
    }
    if (client_only(type) && !client) {
        cJSON_Delete(data);
        return;
    }
    /* progress, progress_state, execution_interrupted: everyone when there is no client */
    srv_emit(s, client, type, data);
}

static void on_send(void *user, const char *type, cJSON *data)
{
    struct exec_ctx *ec = user;
    if (strcmp(type, "executing") == 0) {
        const cJSON *dn = cJSON_GetObjectItemCaseSensitive(data, "display_node");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(data, "node");
        const char *node = cJSON_IsString(dn) ? dn->valuestring
                           : cJSON_IsString(n) ? n->valuestring
                                               : NULL;
        srv_ws_set_executing(ec->srv->ws, ec->job->client_id, node);
    }
    route_event(ec->srv, ec->job->client_id, type, data);
}

static void on_preview(void *user, int image_type, const void *bytes, size_t n,
                       const char *node_id, const char *prompt_id)
{
    struct exec_ctx *ec = user;
    srv_emit_preview(ec->srv, ec->job->client_id, image_type, bytes, n, node_id,
                     prompt_id ? prompt_id : ec->job->prompt_id);
}

static cJSON *stamp(const char *prompt_id)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "prompt_id", prompt_id);
    cJSON_AddNumberToObject(d, "timestamp", (double)clock_wall_ms());
    return d;
}

static void append_message(cJSON *messages, const char *type, const cJSON *data)
{
    cJSON *m = cJSON_CreateArray();
    cJSON_AddItemToArray(m, cJSON_CreateString(type));
    cJSON_AddItemToArray(m, cJSON_Duplicate(data, 1));
    cJSON_AddItemToArray(messages, m);
}

static char *print_or(const cJSON *j, const char *dflt)
{
    if (!j)
        return xstrdup(dflt);
    char *p = cJSON_PrintUnformatted(j);
    char *s = xstrdup(p);
    cJSON_free(p);
    return s;
}

static void run_job(struct srv *s, struct srv_job *j)
{
    srv_store_mark_running(s->store, j->row_id);
    srv_broadcast_status(s); /* ComfyUI sends status when the worker takes the item */
    log_info("prompt '%s': started", j->prompt_id);
    int64_t t0 = clock_wall_ms();

    struct exec_ctx ec = {s, j};
    struct graph_events ev = {&ec, on_send, on_preview};
    struct graph_job gj = {.prompt_id = j->prompt_id, .prompt = j->prompt, .native = j->native,
                           .extra_data = j->extra_data, .outputs_to_execute = j->outputs};
    struct graph_result res;
    memset(&res, 0, sizeof(res));
    int rc = graph_execute(s->graph, &gj, &ev, &res);
    if (!res.messages)
        res.messages = cJSON_CreateArray();
    const char *status_str;
    if (rc < 0) {
        /* The context itself broke: report it like a runtime error so clients finish. */
        cJSON *d = stamp(j->prompt_id);
        cJSON_AddNullToObject(d, "node_id");
        cJSON_AddNullToObject(d, "node_type");
        cJSON_AddItemToObject(d, "executed", cJSON_CreateArray());
        cJSON_AddStringToObject(d, "exception_message", "internal executor failure\n");
        cJSON_AddStringToObject(d, "exception_type", "RuntimeError");
        cJSON_AddItemToObject(d, "traceback", cJSON_CreateArray());
        cJSON_AddItemToObject(d, "current_inputs", cJSON_CreateObject());
        cJSON_AddItemToObject(d, "current_outputs", cJSON_CreateArray());
        append_message(res.messages, "execution_error", d);
        route_event(s, j->client_id, "execution_error", d);
        status_str = "error";
    } else {
        status_str = res.status == GRAPH_STATUS_SUCCESS       ? "success"
                     : res.status == GRAPH_STATUS_INTERRUPTED ? "interrupted"
                                                              : "error";
    }
    cJSON *success = NULL;
    if (rc >= 0 && res.status == GRAPH_STATUS_SUCCESS) {
        success = stamp(j->prompt_id);
        append_message(res.messages, "execution_success", success);
    }
    char *outputs = print_or(res.outputs, "{}");
    char *messages = print_or(res.messages, "[]");
    char *meta = print_or(res.meta, "{}");
    /* 0. files shared (a shared store), so /view anywhere finds what history lists */
    srv_jobs_share_outputs(s, res.outputs);
    /* 1. history written; ERR_BUSY: our lease ran out and the job was taken over, so the
     * new run speaks for it from here on */
    int taken = srv_store_finish(s->store, j->row_id, status_str, outputs, messages, meta) ==
                ERR_BUSY;
    xfree(outputs);
    xfree(messages);
    xfree(meta);
    graph_result_release(&res);
    /* 2. the item leaves queue_running */
    struct srv_job *done = srv_queue_finish_running(&s->queue);
    srv_ws_set_executing(s->ws, NULL, NULL);
    if (taken) {
        cJSON_Delete(success);
        srv_job_free(done);
        return;
    }
    /* 3. execution_success */
    if (success)
        route_event(s, j->client_id, "execution_success", success);
    /* 4. status */
    srv_broadcast_status(s);
    /* 5. executing{node:null} */
    cJSON *fin = cJSON_CreateObject();
    cJSON_AddNullToObject(fin, "node");
    cJSON_AddStringToObject(fin, "prompt_id", j->prompt_id);
    route_event(s, j->client_id, "executing", fin);
    log_info("prompt '%s': %s in %.3f s", j->prompt_id, status_str,
             (double)(clock_wall_ms() - t0) / 1000.0);
    srv_job_free(done);
}

static void apply_free(struct srv *s)
{
    if (!atomic_exchange(&s->free_pending, 0))
        return;
    int unload = atomic_exchange(&s->free_unload, 0);
    int mem = atomic_exchange(&s->free_memory, 0);
    log_debug("free: unload_models=%d free_memory=%d", unload, mem);
    graph_free_memory(s->graph, unload, mem);
}

static void *exec_main(void *arg)
{
    struct srv *s = arg;
    for (;;) {
        apply_free(s);
        struct srv_job *j = srv_jobs_next(s);
        if (j) {
            run_job(s, j);
            continue;
        }
        pthread_mutex_lock(&s->queue.lock);
        int stopping = s->queue.stopping;
        pthread_mutex_unlock(&s->queue.lock);
        if (stopping)
            break;
    }
    return NULL;
}

int srv_exec_start(struct srv *s, struct err *e)
{
    if (pthread_create(&s->exec_thread, NULL, exec_main, s) != 0)
        return err_set(e, ERR_INTERNAL, "cannot start the executor thread");
    return 0;
}

void srv_exec_stop(struct srv *s)
{
    srv_queue_stop(&s->queue);
    graph_interrupt(s->graph);
    pthread_join(s->exec_thread, NULL);
}
