/*
 * srv — the server's shared state and the internal interfaces between its parts
 * (listener, HTTP routes, WebSocket hub, executor). Private to server/.
 *
 * Ownership: main() owns the struct srv; every part borrows it for the process lifetime.
 * Threads:
 *   - listener thread: accepts, peeks the request head, hands sockets to MHD or lws;
 *   - MHD's threads: run routes (srv_http.c, routes*.c);
 *   - the lws service thread: owns every WebSocket (srv_ws.c);
 *   - one executor thread: pops jobs and runs graph_execute (srv_exec.c).
 * Shared mutable state is the queue (own lock), the store (own lock) and the WS inbox
 * (own lock). The graph context is called per graph.h's thread rules.
 */
#ifndef LATENTD_SERVER_SRV_H
#define LATENTD_SERVER_SRV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <cjson/cJSON.h>

#include "graph.h"
#include "srv_config.h"
#include "srv_queue.h"
#include "srv_store.h"

struct srv_ws;
struct srv_http;
struct srv_listener;

struct srv {
    struct srv_config *cfg;     /* borrowed (owned by main) */
    struct graph_ctx *graph;    /* owned by main */
    struct srv_store *store;    /* owned by main */
    struct srv_queue queue;
    struct srv_ws *ws;
    struct srv_http *http;
    struct srv_listener *listener;
    pthread_t exec_thread;
    atomic_int free_unload;     /* deferred POST /free flags, consumed by the executor */
    atomic_int free_memory;
    atomic_int free_pending;
    int64_t start_ms;           /* process start (ms since the epoch) */
};

/* ---- WebSocket hub (srv_ws.c) ----------------------------------------------------- */

/* Create the lws context (no listen socket) and start its service thread. */
struct srv_ws *srv_ws_new(struct srv *s, struct err *e);
void srv_ws_free(struct srv_ws *ws);

/* Any thread: hand an accepted socket whose head is a WebSocket upgrade to lws. */
void srv_ws_adopt(struct srv_ws *ws, int fd);

/* Any thread: queue a text message {"type","data"} for one sid (sid NULL = every socket).
 * Takes ownership of `data`. */
void srv_ws_send(struct srv_ws *ws, const char *sid, const char *type, cJSON *data);

/* Any thread: a preview image; clients that negotiated supports_preview_metadata get
 * the type-4 frame, others type 1 (comfy-api.md §4.6). sid NULL = every socket. */
void srv_ws_send_preview(struct srv_ws *ws, const char *sid, int image_type, const void *bytes,
                         size_t n, const char *node_id, const char *prompt_id);

/* Executor thread: remember who runs what, for the reconnect message of §4.1. node NULL
 * clears it. */
void srv_ws_set_executing(struct srv_ws *ws, const char *client_id, const char *node);

/* Number of open WebSocket connections (tests, logs). */
int srv_ws_count(struct srv_ws *ws);

/* Broadcast {"type":"status","data":{"status":{"exec_info":{"queue_remaining":N}}}}. */
void srv_broadcast_status(struct srv *s);

/* ---- HTTP (srv_http.c) --------------------------------------------------------------- */

struct srv_http *srv_http_new(struct srv *s, struct err *e);
void srv_http_free(struct srv_http *h);
/*
 * Any thread (the listener's): hand an accepted socket whose request head is complete to
 * libmicrohttpd. Over the total or per-address connection cap it answers 503 and closes
 * instead. Closes fd on failure.
 */
void srv_http_add(struct srv_http *h, int fd, const struct sockaddr *sa, socklen_t len);

/* 0 when the origin guard of comfy-api.md §1.4 rejects Host/Origin (either may be NULL). */
int srv_origin_allowed(const char *host, const char *origin);

/* ---- listener (srv_listen.c) ----------------------------------------------------------- */

struct srv_listen_handlers {
    void *user;
    void (*http)(void *user, int fd, const struct sockaddr *sa, socklen_t len);
    void (*ws)(void *user, int fd);
};

/* Defaults of the request deadlines (--head-timeout, --body-timeout). */
#define SRV_HEAD_TIMEOUT_MS 10000 /* accept (or the previous response) to a complete head */
#define SRV_BODY_TIMEOUT_MS 60000 /* complete head to complete body */

/* Bind every address on `port` (0 = pick one; all addresses then share it). */
struct srv_listener *srv_listen_new(char *const *addrs, int n_addrs, int port, struct err *e);
/* Main thread, before srv_listen_start: take the head deadline from the config (the
 * default is SRV_HEAD_TIMEOUT_MS). */
void srv_listen_configure(struct srv_listener *l, const struct srv_config *cfg);
int srv_listen_port(const struct srv_listener *l);
/* Start the accept thread. */
int srv_listen_start(struct srv_listener *l, const struct srv_listen_handlers *h, struct err *e);
/* Stop the accept thread, close listening and half-peeked sockets. */
void srv_listen_free(struct srv_listener *l);

/*
 * Any thread: answer a socket that no library has parsed (or will finish parsing) with a
 * short ComfyUI-shaped JSON error and `Connection: close`, in one non-blocking send.
 * srv_reply_raw only sends; the caller still owns fd. srv_reply_close also reads what is waiting, half-closes and closes fd.
 */
void srv_reply_raw(int fd, unsigned status, const char *type, const char *message);
void srv_reply_close(int fd, unsigned status, const char *type, const char *message);

/* ---- the queue wherever it lives (srv_jobs.c) ----------------------------------------------
 * In memory (SQLite store) or in the database (shared PostgreSQL store): routes and the
 * executor call these and never choose. Any thread unless noted. */

/* The next priority number (ComfyUI's counter; negated for `front`), cluster-wide. */
int64_t srv_jobs_take_number(struct srv *s, int front);
/* pending + running, cluster-wide. */
int srv_jobs_remaining(struct srv *s);
/* /queue's {"queue_running", "queue_pending"}; caller frees. */
cJSON *srv_jobs_queue_json(struct srv *s);
/* Remove pending jobs (all with `clear`, and those whose prompt_id is in `ids`), then
 * announce the new count. */
void srv_jobs_remove(struct srv *s, int clear, const cJSON *ids);
/* Interrupt the running prompt `prompt_id`, or every running prompt when NULL (one
 * process runs at most one; a cluster may run one per worker). */
void srv_jobs_interrupt(struct srv *s, const char *prompt_id);
/* /system_stats "workers" (live processes on a shared store) or NULL. Caller frees. */
cJSON *srv_jobs_workers(struct srv *s);
/* Main thread: start the shared store's watch thread (events, interrupts, leases). */
int srv_jobs_start(struct srv *s, struct err *e);
/* Main thread: stop it again (before the hub goes: it delivers events there). */
void srv_jobs_stop(struct srv *s);
/* Executor thread: the next job to run (now listed as running), or NULL on stop/wake. */
struct srv_job *srv_jobs_next(struct srv *s);

/* Send an event to a client (sid NULL = all): straight to this process's hub, or through a
 * shared store to whichever process the client is connected to. Takes `data`. */
void srv_emit(struct srv *s, const char *sid, const char *type, cJSON *data);
void srv_emit_preview(struct srv *s, const char *sid, int image_type, const void *bytes,
                      size_t n, const char *node_id, const char *prompt_id);
/* "status" with the queue count, to everyone. */
void srv_emit_status(struct srv *s);

/* Shared store: copy a file to / from the database, so /view on any process serves what
 * any worker made and a prompt may name an upload made through another process (fetched
 * into the local folder, where it is then kept). 0, ERR_NOT_FOUND, or another error. */
int srv_jobs_share_file(struct srv *s, const char *type, const char *sub, const char *name);
int srv_jobs_fetch_file(struct srv *s, const char *type, const char *sub, const char *name);
/* Fetch the inputs a prompt names ("image" inputs) that are missing here: before
 * validation on a front, before the run on a worker. No-op for a store of one process. */
void srv_jobs_fetch_inputs(struct srv *s, const cJSON *prompt);
/* Executor thread: share every file a result's outputs list. */
void srv_jobs_share_outputs(struct srv *s, const cJSON *outputs);

/* ---- executor (srv_exec.c) ---------------------------------------------------------------- */

int srv_exec_start(struct srv *s, struct err *e);
/* Stops after the running prompt (it is interrupted first). */
void srv_exec_stop(struct srv *s);

#endif
