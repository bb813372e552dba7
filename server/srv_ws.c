/*
 * The WebSocket hub: one libwebsockets context without a listen socket, serviced on its
 * own thread, which owns every connection.
 *
 * DESIGN
 * Other threads never touch a wsi. They append to `inbox` (sockets to adopt, messages to
 * route) under `lock` and call lws_cancel_service(), which wakes the service thread with
 * LWS_CALLBACK_EVENT_WAIT_CANCELLED; there the inbox is drained: sockets are adopted and
 * each message is appended to the out-queue of the connections it is addressed to (routing
 * by sid happens here, on the thread that owns the connection list, so no lock guards the
 * list). A connection writes one frame per WRITEABLE callback.
 * A peer that stops reading is closed once its out-queue passes WS_MAX_QUEUED frames or
 * WS_MAX_QUEUED_BYTES, so a dead client cannot grow memory without bound.
 *
 * Preview order per client (comfy-api.md §4.5): the executor emits a sampling step as
 * progress_state, preview, progress, which is what a client that negotiated
 * supports_preview_metadata gets (type-4 frame between the two). A legacy client gets its
 * type-1 frame AFTER progress, as ComfyUI sends it: the frame is held on that connection
 * until the next progress message (or flushed before any other message but
 * progress_state, so it is never late by more than a step).
 */
#include <libwebsockets.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "log.h"
#include "srv.h"
#include "uuid.h"

#define WS_MAX_QUEUED 4096                /* frames */
#define WS_MAX_QUEUED_BYTES (64u << 20)   /* previews are large: cap the bytes too */
#define WS_MAX_IN 65536 /* bytes of one client text message we keep; more is ignored */
#define WS_SID_MAX 256

/* A frame shared by every connection it is queued on. */
struct ws_frame {
    atomic_int refs;
    int binary;
    size_t len;
    unsigned char data[]; /* LWS_PRE bytes of headroom, then len bytes */
};

struct ws_qnode {
    struct ws_frame *f;
    struct ws_qnode *next;
};

struct ws_conn {
    struct lws *wsi;
    struct ws_frame *held; /* legacy preview waiting for its progress message (ref held) */
    char sid[WS_SID_MAX];
    int owner;            /* routes for sid go here (the newest connection with that sid) */
    int seen_text;        /* a text message arrived: later feature_flags are ignored */
    int preview_metadata; /* negotiated supports_preview_metadata */
    int closing;
    struct ws_qnode *head, *tail;
    int queued;
    size_t queued_bytes;
    char *in;             /* partial incoming text message */
    size_t in_len;
    int in_overflow;
    struct ws_conn *prev, *next;
};

enum ws_kind {
    WS_KIND_OTHER,
    WS_KIND_PROGRESS,
    WS_KIND_PROGRESS_STATE,
    WS_KIND_PREVIEW,
};

/* An inbox entry: a frame (or a preview pair) for a sid or for all. */
struct ws_msg {
    enum ws_kind kind;
    char *sid;               /* owned or NULL = all */
    struct ws_frame *f;      /* text or binary frame for everyone */
    struct ws_frame *f_meta; /* preview variant for metadata clients, or NULL */
    struct ws_msg *next;
};

struct ws_adopt {
    int fd;
    struct ws_adopt *next;
};

struct srv_ws {
    struct srv *srv;
    struct lws_context *ctx;
    struct lws_vhost *vh;
    pthread_t thread;
    atomic_int stop;
    atomic_int count;

    pthread_mutex_t lock;    /* leaf: guards the inbox and the executing state */
    struct ws_msg *in_head, *in_tail;
    struct ws_adopt *adopt;
    char *exec_client;       /* owned; client of the running prompt */
    char *exec_node;         /* owned; node executing now */

    struct ws_conn *conns;   /* service thread only */
};

static struct ws_frame *frame_new(int binary, const void *a, size_t na, const void *b, size_t nb)
{
    struct ws_frame *f = xmalloc(sizeof(*f) + LWS_PRE + na + nb);
    atomic_init(&f->refs, 1);
    f->binary = binary;
    f->len = na + nb;
    if (na)
        memcpy(f->data + LWS_PRE, a, na);
    if (nb)
        memcpy(f->data + LWS_PRE + na, b, nb);
    return f;
}

static void frame_unref(struct ws_frame *f)
{
    if (f && atomic_fetch_sub(&f->refs, 1) == 1)
        xfree(f);
}

static void conn_push(struct ws_conn *c, struct ws_frame *f)
{
    if (c->closing)
        return;
    if (c->queued >= WS_MAX_QUEUED || c->queued_bytes + f->len > WS_MAX_QUEUED_BYTES) {
        log_warn("ws: client '%s' is not reading; closing it", c->sid);
        c->closing = 1;
        /* Its socket is not writable (that is the problem), so a WRITEABLE-driven close
         * would never come: have lws kill it on the next service pass. */
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_CLOSE_ACK, LWS_TO_KILL_ASYNC);
        return;
    }
    atomic_fetch_add(&f->refs, 1);
    struct ws_qnode *n = xmalloc(sizeof(*n));
    n->f = f;
    n->next = NULL;
    if (c->tail)
        c->tail->next = n;
    else
        c->head = n;
    c->tail = n;
    c->queued++;
    c->queued_bytes += f->len;
    lws_callback_on_writable(c->wsi);
}

static void conn_clear(struct ws_conn *c)
{
    while (c->head) {
        struct ws_qnode *n = c->head;
        c->head = n->next;
        frame_unref(n->f);
        xfree(n);
    }
    c->tail = NULL;
    c->queued = 0;
    c->queued_bytes = 0;
    frame_unref(c->held);
    c->held = NULL;
    xfree(c->in);
    c->in = NULL;
}

static struct ws_frame *json_frame(const char *type, cJSON *data)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", type);
    cJSON_AddItemToObject(m, "data", data ? data : cJSON_CreateObject());
    char *text = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    struct ws_frame *f = frame_new(0, text, strlen(text), NULL, 0);
    cJSON_free(text);
    return f;
}

static void inbox_push(struct srv_ws *ws, enum ws_kind kind, const char *sid, struct ws_frame *f,
                       struct ws_frame *f_meta)
{
    struct ws_msg *m = xcalloc(1, sizeof(*m));
    m->kind = kind;
    m->sid = sid ? xstrdup(sid) : NULL;
    m->f = f;
    m->f_meta = f_meta;
    pthread_mutex_lock(&ws->lock);
    if (ws->in_tail)
        ws->in_tail->next = m;
    else
        ws->in_head = m;
    ws->in_tail = m;
    pthread_mutex_unlock(&ws->lock);
    lws_cancel_service(ws->ctx);
}

void srv_ws_send(struct srv_ws *ws, const char *sid, const char *type, cJSON *data)
{
    enum ws_kind kind = strcmp(type, "progress") == 0         ? WS_KIND_PROGRESS
                        : strcmp(type, "progress_state") == 0 ? WS_KIND_PROGRESS_STATE
                                                              : WS_KIND_OTHER;
    inbox_push(ws, kind, sid, json_frame(type, data), NULL);
}

static void be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

void srv_ws_send_preview(struct srv_ws *ws, const char *sid, int image_type, const void *bytes,
                         size_t n, const char *node_id, const char *prompt_id)
{
    unsigned char hdr[8];
    be32(hdr, 1); /* PREVIEW_IMAGE */
    be32(hdr + 4, (uint32_t)image_type);
    struct ws_frame *legacy = frame_new(1, hdr, 8, bytes, n);

    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "node_id", node_id ? node_id : "");
    cJSON_AddStringToObject(meta, "prompt_id", prompt_id ? prompt_id : "");
    cJSON_AddStringToObject(meta, "display_node_id", node_id ? node_id : "");
    cJSON_AddNullToObject(meta, "parent_node_id");
    cJSON_AddStringToObject(meta, "real_node_id", node_id ? node_id : "");
    cJSON_AddStringToObject(meta, "image_type", image_type == 2 ? "image/png" : "image/jpeg");
    char *mj = cJSON_PrintUnformatted(meta);
    cJSON_Delete(meta);
    size_t mlen = strlen(mj);
    unsigned char *head = xmalloc(8 + mlen);
    be32(head, 4); /* PREVIEW_IMAGE_WITH_METADATA */
    be32(head + 4, (uint32_t)mlen);
    memcpy(head + 8, mj, mlen);
    cJSON_free(mj);
    struct ws_frame *withmeta = frame_new(1, head, 8 + mlen, bytes, n);
    xfree(head);
    inbox_push(ws, WS_KIND_PREVIEW, sid, legacy, withmeta);
}

void srv_ws_set_executing(struct srv_ws *ws, const char *client_id, const char *node)
{
    pthread_mutex_lock(&ws->lock);
    xfree(ws->exec_client);
    xfree(ws->exec_node);
    ws->exec_client = client_id && node ? xstrdup(client_id) : NULL;
    ws->exec_node = client_id && node ? xstrdup(node) : NULL;
    pthread_mutex_unlock(&ws->lock);
}

void srv_ws_adopt(struct srv_ws *ws, int fd)
{
    struct ws_adopt *a = xmalloc(sizeof(*a));
    a->fd = fd;
    pthread_mutex_lock(&ws->lock);
    a->next = ws->adopt;
    ws->adopt = a;
    pthread_mutex_unlock(&ws->lock);
    lws_cancel_service(ws->ctx);
}

int srv_ws_count(struct srv_ws *ws)
{
    return atomic_load(&ws->count);
}

static void flush_held(struct ws_conn *c)
{
    if (c->held) {
        conn_push(c, c->held);
        frame_unref(c->held);
        c->held = NULL;
    }
}

/* Service thread: one message to one connection, with the legacy preview reordering. */
static void route_to_conn(struct ws_conn *c, const struct ws_msg *m)
{
    switch (m->kind) {
    case WS_KIND_PREVIEW:
        if (c->preview_metadata && m->f_meta) {
            conn_push(c, m->f_meta);
        } else {
            flush_held(c);
            atomic_fetch_add(&m->f->refs, 1);
            c->held = m->f;
        }
        break;
    case WS_KIND_PROGRESS:
        conn_push(c, m->f);
        flush_held(c);
        break;
    case WS_KIND_PROGRESS_STATE:
        conn_push(c, m->f);
        break;
    case WS_KIND_OTHER:
        flush_held(c);
        conn_push(c, m->f);
        break;
    }
}

/* Service thread: adopt queued sockets and route queued messages. */
static void drain_inbox(struct srv_ws *ws)
{
    pthread_mutex_lock(&ws->lock);
    struct ws_msg *m = ws->in_head;
    struct ws_adopt *a = ws->adopt;
    ws->in_head = ws->in_tail = NULL;
    ws->adopt = NULL;
    pthread_mutex_unlock(&ws->lock);

    while (a) {
        struct ws_adopt *next = a->next;
        if (!lws_adopt_socket_vhost(ws->vh, a->fd)) {
            log_warn("ws: cannot adopt socket %d", a->fd);
            close(a->fd);
        }
        xfree(a);
        a = next;
    }
    while (m) {
        struct ws_msg *next = m->next;
        for (struct ws_conn *c = ws->conns; c; c = c->next) {
            if (!c->sid[0])
                continue; /* not yet established */
            if (m->sid && (!c->owner || strcmp(c->sid, m->sid) != 0))
                continue;
            route_to_conn(c, m);
        }
        frame_unref(m->f);
        frame_unref(m->f_meta);
        xfree(m->sid);
        xfree(m);
        m = next;
    }
}

static void on_established(struct srv_ws *ws, struct ws_conn *c, struct lws *wsi)
{
    memset(c, 0, sizeof(*c));
    c->wsi = wsi;
    char arg[WS_SID_MAX + 16];
    /* lws 4.1 copies "clientId=VALUE" into arg and returns a pointer to VALUE. */
    const char *v = lws_get_urlarg_by_name(wsi, "clientId=", arg, sizeof(arg));
    if (v && *v && strlen(v) < WS_SID_MAX)
        memcpy(c->sid, v, strlen(v) + 1);
    else
        uuid4_format(c->sid, 0); /* ComfyUI: 32 hex chars, no dashes */
    /* One socket per sid: the newest owns the routing entry (comfy-api.md §4.1). */
    for (struct ws_conn *o = ws->conns; o; o = o->next)
        if (strcmp(o->sid, c->sid) == 0)
            o->owner = 0;
    c->owner = 1;
    c->next = ws->conns;
    if (ws->conns)
        ws->conns->prev = c;
    ws->conns = c;
    atomic_fetch_add(&ws->count, 1);
    log_debug("ws: client '%s' connected", c->sid);

    cJSON *d = cJSON_CreateObject();
    cJSON *st = cJSON_AddObjectToObject(d, "status");
    cJSON *ei = cJSON_AddObjectToObject(st, "exec_info");
    cJSON_AddNumberToObject(ei, "queue_remaining", srv_jobs_remaining(ws->srv));
    cJSON_AddStringToObject(d, "sid", c->sid);
    struct ws_frame *f = json_frame("status", d);
    conn_push(c, f);
    frame_unref(f);

    /* Reconnect while this client's prompt runs: a bare executing{node}. */
    pthread_mutex_lock(&ws->lock);
    cJSON *ex = NULL;
    if (ws->exec_client && ws->exec_node && strcmp(ws->exec_client, c->sid) == 0) {
        ex = cJSON_CreateObject();
        cJSON_AddStringToObject(ex, "node", ws->exec_node);
    }
    pthread_mutex_unlock(&ws->lock);
    if (ex) {
        f = json_frame("executing", ex);
        conn_push(c, f);
        frame_unref(f);
    }
}

static void on_text(struct srv_ws *ws, struct ws_conn *c)
{
    if (c->seen_text)
        return;
    c->seen_text = 1;
    cJSON *m = cJSON_ParseWithLength(c->in, c->in_len);
    if (!m) {
        log_debug("ws: client '%s' sent malformed JSON; ignored", c->sid);
        return;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(m, "type");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(m, "data");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "feature_flags") == 0 &&
        cJSON_IsObject(data)) {
        c->preview_metadata =
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(data, "supports_preview_metadata"));
        cJSON *d = cJSON_CreateObject();
        cJSON_AddBoolToObject(d, "supports_preview_metadata", 1);
        cJSON_AddNumberToObject(d, "max_upload_size", (double)ws->srv->cfg->max_upload_bytes);
        struct ws_frame *f = json_frame("feature_flags", d);
        conn_push(c, f);
        frame_unref(f);
    }
    cJSON_Delete(m);
}

static int ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
    struct srv_ws *ws = lws_context_user(lws_get_context(wsi));
    struct ws_conn *c = user;
    switch (reason) {
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if (ws)
            drain_inbox(ws);
        break;
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
        if (ws->srv->cfg->cors_origin)
            break;
        char host[256] = "", origin[512] = "";
        int hl = lws_hdr_copy(wsi, host, sizeof(host), WSI_TOKEN_HOST);
        int ol = lws_hdr_copy(wsi, origin, sizeof(origin), WSI_TOKEN_ORIGIN);
        if (!srv_origin_allowed(hl > 0 ? host : NULL, ol > 0 ? origin : NULL)) {
            log_info("ws: origin '%s' refused for host '%s'", origin, host);
            return -1;
        }
        break;
    }
    case LWS_CALLBACK_ESTABLISHED:
        on_established(ws, c, wsi);
        break;
    case LWS_CALLBACK_RECEIVE:
        if (lws_frame_is_binary(wsi))
            break; /* clients only send JSON text; binary is ignored */
        if (!c->in_overflow) {
            if (c->in_len + len > WS_MAX_IN) {
                c->in_overflow = 1;
            } else {
                c->in = xrealloc(c->in, c->in_len + len + 1);
                memcpy(c->in + c->in_len, in, len);
                c->in_len += len;
            }
        }
        if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi)) {
            if (!c->in_overflow)
                on_text(ws, c);
            else
                c->seen_text = 1;
            xfree(c->in);
            c->in = NULL;
            c->in_len = 0;
            c->in_overflow = 0;
        }
        break;
    case LWS_CALLBACK_SERVER_WRITEABLE: {
        if (c->closing)
            return -1;
        struct ws_qnode *n = c->head;
        if (!n)
            break;
        int m = lws_write(wsi, n->f->data + LWS_PRE, n->f->len,
                          n->f->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT);
        c->head = n->next;
        if (!c->head)
            c->tail = NULL;
        c->queued--;
        c->queued_bytes -= n->f->len;
        frame_unref(n->f);
        xfree(n);
        if (m < 0)
            return -1;
        if (c->head)
            lws_callback_on_writable(wsi);
        break;
    }
    case LWS_CALLBACK_CLOSED:
        if (c->wsi) {
            log_debug("ws: client '%s' disconnected", c->sid);
            if (c->prev)
                c->prev->next = c->next;
            else
                ws->conns = c->next;
            if (c->next)
                c->next->prev = c->prev;
            conn_clear(c);
            c->wsi = NULL;
            atomic_fetch_sub(&ws->count, 1);
        }
        break;
    case LWS_CALLBACK_HTTP:
        /* A plain HTTP request never reaches lws (the listener routes it to MHD). */
        lws_return_http_status(wsi, HTTP_STATUS_BAD_REQUEST, NULL);
        return -1;
    default:
        break;
    }
    return 0;
}

static const struct lws_protocols ws_protocols[] = {
    {"latentd", ws_callback, sizeof(struct ws_conn), 4096, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void *service_main(void *arg)
{
    struct srv_ws *ws = arg;
    while (!atomic_load(&ws->stop))
        if (lws_service(ws->ctx, 0) < 0)
            break;
    return NULL;
}

static void lws_log_bridge(int level, const char *line)
{
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        n--;
    if (level & LLL_ERR)
        log_warn("lws: %.*s", (int)n, line);
    else
        log_debug("lws: %.*s", (int)n, line);
}

struct srv_ws *srv_ws_new(struct srv *s, struct err *e)
{
    struct srv_ws *ws = xcalloc(1, sizeof(*ws));
    ws->srv = s;
    pthread_mutex_init(&ws->lock, NULL);
    lws_set_log_level(LLL_ERR | (log_get_level() == LOG_DEBUG ? LLL_WARN : 0), lws_log_bridge);

    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.port = CONTEXT_PORT_NO_LISTEN_SERVER;
    info.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
    info.user = ws;
    info.protocols = ws_protocols;
    info.gid = -1;
    info.uid = -1;
    /* Large enough for a browser's cookie-laden upgrade request. */
    info.max_http_header_data = 16384;
    ws->ctx = lws_create_context(&info);
    if (!ws->ctx) {
        err_set(e, ERR_INTERNAL, "cannot create the websocket context");
        goto fail;
    }
    info.vhost_name = "latentd";
    ws->vh = lws_create_vhost(ws->ctx, &info);
    if (!ws->vh) {
        err_set(e, ERR_INTERNAL, "cannot create the websocket vhost");
        goto fail;
    }
    if (pthread_create(&ws->thread, NULL, service_main, ws) != 0) {
        err_set(e, ERR_INTERNAL, "cannot start the websocket thread");
        goto fail;
    }
    return ws;
fail:
    if (ws->ctx)
        lws_context_destroy(ws->ctx);
    pthread_mutex_destroy(&ws->lock);
    xfree(ws);
    return NULL;
}

void srv_ws_free(struct srv_ws *ws)
{
    if (!ws)
        return;
    atomic_store(&ws->stop, 1);
    lws_cancel_service(ws->ctx);
    pthread_join(ws->thread, NULL);
    lws_context_destroy(ws->ctx); /* closes connections: CLOSED frees their queues */
    while (ws->in_head) {
        struct ws_msg *m = ws->in_head;
        ws->in_head = m->next;
        frame_unref(m->f);
        frame_unref(m->f_meta);
        xfree(m->sid);
        xfree(m);
    }
    while (ws->adopt) {
        struct ws_adopt *a = ws->adopt;
        ws->adopt = a->next;
        close(a->fd);
        xfree(a);
    }
    xfree(ws->exec_client);
    xfree(ws->exec_node);
    pthread_mutex_destroy(&ws->lock);
    xfree(ws);
}
