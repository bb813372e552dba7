/*
 * Execution events (comfy-api.md §4.4-4.5) and the history messages.
 *
 * progress_state carries a snapshot of every started node, as ComfyUI sends it.
 * That is quadratic in the number of nodes, so above PROGRESS_SNAPSHOT_MAX
 * started nodes we send only the node that changed, which is the running one (a
 * decision: ComfyUI has no answer for huge graphs, and the frontend only draws
 * running nodes' bars).
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "graph_run.h"
#include "node_imageio.h"

#define PROGRESS_SNAPSHOT_MAX 100

int graph__want_events(const struct run *r)
{
    return r->ev && r->ev->send;
}

void graph__send_ev(struct run *r, const char *type, cJSON *data, int record)
{
    if (record) {
        cJSON *m = cJSON_CreateArray();
        cJSON_AddItemToArray(m, cJSON_CreateString(type));
        cJSON_AddItemToArray(m, cJSON_Duplicate(data, 1));
        cJSON_AddItemToArray(r->res->messages, m);
    }
    if (graph__want_events(r))
        r->ev->send(r->ev->user, type, data);
    else
        cJSON_Delete(data);
}

static cJSON *pstate_entry(struct run *r, int n)
{
    const struct xnode *x = &r->x[n];
    const char *id = r->p->nodes[n].id;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "value", x->pv);
    cJSON_AddNumberToObject(e, "max", x->pmax);
    cJSON_AddStringToObject(e, "state", x->pstate == X_FINISHED ? "finished" : "running");
    cJSON_AddStringToObject(e, "node_id", id);
    cJSON_AddStringToObject(e, "prompt_id", r->job->prompt_id);
    cJSON_AddStringToObject(e, "display_node_id", id);
    cJSON_AddNullToObject(e, "parent_node_id");
    cJSON_AddStringToObject(e, "real_node_id", id);
    return e;
}

static void send_progress_state(struct run *r, int changed)
{
    if (!graph__want_events(r))
        return;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "prompt_id", r->job->prompt_id);
    cJSON *nodes = cJSON_AddObjectToObject(d, "nodes");
    if (r->n_started <= PROGRESS_SNAPSHOT_MAX) {
        for (int i = 0; i < r->n_started; i++)
            cJSON_AddItemToObject(nodes, r->p->nodes[r->started[i]].id, pstate_entry(r, r->started[i]));
    } else {
        /* Nodes run one at a time, so the changed node is the only running one. */
        cJSON_AddItemToObject(nodes, r->p->nodes[changed].id, pstate_entry(r, changed));
    }
    graph__send_ev(r, "progress_state", d, 0);
}

void graph__pstate_set(struct run *r, int n, enum xstate st, double v, double max)
{
    struct xnode *x = &r->x[n];
    if (x->pstate == X_IDLE)
        r->started[r->n_started++] = n;
    x->pstate = (uint8_t)st;
    x->pv = v;
    x->pmax = max;
    send_progress_state(r, n);
}

cJSON *graph__base_data(struct run *r)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "prompt_id", r->job->prompt_id);
    return d;
}

void graph__send_executed(struct run *r, int n, const cJSON *ui)
{
    if (!graph__want_events(r))
        return;
    const char *id = r->p->nodes[n].id;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "node", id);
    cJSON_AddStringToObject(d, "display_node", id);
    cJSON_AddItemToObject(d, "output", ui ? cJSON_Duplicate(ui, 1) : cJSON_CreateNull());
    cJSON_AddStringToObject(d, "prompt_id", r->job->prompt_id);
    graph__send_ev(r, "executed", d, 0);
}

static cJSON *current_inputs(struct run *r, int n, struct value **in)
{
    const struct gnode *gn = &r->p->nodes[n];
    cJSON *o = cJSON_CreateObject();
    for (int k = 0; k < gn->n_in; k++) {
        const struct value *v = in[k];
        if (!v)
            continue;
        cJSON *item;
        if (v->kind == VALUE_INT)
            item = gjson_int(v->i, v->big);
        else if (v->kind == VALUE_FLOAT)
            item = isfinite(v->f) ? cJSON_CreateNumber(v->f) : cJSON_CreateNull();
        else if (v->kind == VALUE_BOOLEAN)
            item = cJSON_CreateBool((int)v->i);
        else if (v->kind == VALUE_STRING)
            item = cJSON_CreateString(v->s);
        else {
            struct buf b;
            buf_init(&b);
            value_describe(v, &b);
            item = cJSON_CreateString(b.ptr);
            buf_release(&b);
        }
        cJSON *arr = cJSON_CreateArray();
        cJSON_AddItemToArray(arr, item);
        cJSON_AddItemToObject(o, gn->cls->inputs[k].name, arr);
    }
    return o;
}

void graph__send_failure(struct run *r, int n, int interrupted, const char *exc_type,
                         const char *msg, struct value **in)
{
    const struct gnode *gn = &r->p->nodes[n];
    cJSON *d = graph__base_data(r);
    cJSON_AddStringToObject(d, "node_id", gn->id);
    cJSON_AddStringToObject(d, "node_type", gn->cls->name);
    cJSON *ex = cJSON_AddArrayToObject(d, "executed");
    for (int i = 0; i < r->n_executed; i++)
        cJSON_AddItemToArray(ex, cJSON_CreateString(r->p->nodes[r->executed[i]].id));
    if (!interrupted) {
        struct buf m;
        buf_init(&m);
        buf_printf(&m, "%s\n", msg);
        cJSON_AddStringToObject(d, "exception_message", m.ptr);
        buf_release(&m);
        cJSON_AddStringToObject(d, "exception_type", exc_type);
        cJSON_AddItemToObject(d, "traceback", cJSON_CreateArray());
        cJSON_AddItemToObject(d, "current_inputs", in ? current_inputs(r, n, in) : cJSON_CreateObject());
        cJSON *cur = cJSON_AddArrayToObject(d, "current_outputs");
        for (int i = 0; i < r->p->n; i++)
            cJSON_AddItemToArray(cur, cJSON_CreateString(r->p->nodes[i].id));
    }
    cJSON_AddNumberToObject(d, "timestamp", (double)clock_wall_ms());
    graph__send_ev(r, interrupted ? "execution_interrupted" : "execution_error", d, 1);
    r->res->status = interrupted ? GRAPH_STATUS_INTERRUPTED : GRAPH_STATUS_ERROR;
}

/*
 * A node's progress with a full-size image (SaveImageWebsocket): the order of
 * ComfyUI's hook (progress_state, the image, progress) and no throttle, since
 * every image is a result the client waits for. The image goes out as a PNG
 * (zlib level 1, as PIL's compress_level=1) whatever --preview-method says.
 */
int graph__hook_image(void *user, double value, double max, const uint8_t *px, int w, int h,
                      int c)
{
    struct run *r = user;
    if (atomic_load(&r->g->interrupt))
        return ERR_INTERRUPTED;
    int n = r->cur;
    if (n < 0)
        return 0;
    graph__pstate_set(r, n, X_RUNNING, value, max);
    if (px && r->ev && r->ev->preview) {
        struct buf png;
        buf_init(&png);
        if (node_png_encode(px, w, h, c, 1, &png) == 0)
            r->ev->preview(r->ev->user, 2, png.ptr, png.len, r->p->nodes[n].id, r->job->prompt_id);
        buf_release(&png);
    }
    if (graph__want_events(r)) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "value", value);
        cJSON_AddNumberToObject(d, "max", max);
        cJSON_AddStringToObject(d, "prompt_id", r->job->prompt_id);
        cJSON_AddStringToObject(d, "node", r->p->nodes[n].id);
        graph__send_ev(r, "progress", d, 0);
    }
    return 0;
}
