/*
 * The PostgreSQL store's watch thread: one connection of its own that LISTENs on
 * latentd_events / latentd_jobs / latentd_interrupt and, on each tick, renews the running
 * job's lease, writes this process's heartbeat and recovers jobs whose lease ran out.
 *
 * Events are read back from latentd_events by id (> the last one delivered) whenever a
 * NOTIFY says there is something, and on every tick anyway: a NOTIFY lost while the
 * connection was down costs at most one tick of latency, never an event.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "srv_store_pg.h"

#define EVENT_BATCH "500"
#define EVENT_KEEP "10 minutes" /* events older than this are deleted */

static int listen_all(PGconn *c)
{
    PGresult *r = PQexec(c, "LISTEN latentd_events; LISTEN latentd_jobs; LISTEN latentd_interrupt");
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok ? 0 : ERR_IO;
}

/* Deliver every event after st->last_event, in id order. */
static void deliver_events(struct pg_store *st, PGconn *c)
{
    for (;;) {
        char last[32];
        snprintf(last, sizeof(last), "%" PRId64, st->last_event);
        const char *v[1] = {last};
        /* Binary results: bytea arrives as raw bytes. The id goes out as text, so the
         * ORDER BY names the table's column (an output column "id" would sort as text). */
        PGresult *r = PQexecParams(c,
                                   "SELECT e.id::text AS eid, e.sid, e.type, e.data, e.bytes "
                                   "FROM latentd_events e WHERE e.id > $1::bigint "
                                   "ORDER BY e.id LIMIT " EVENT_BATCH,
                                   1, NULL, v, NULL, NULL, 1);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            PQclear(r);
            return;
        }
        int n = PQntuples(r);
        for (int i = 0; i < n; i++) {
            st->last_event = strtoll(PQgetvalue(r, i, 0), NULL, 10);
            const char *sid = PQgetisnull(r, i, 1) ? NULL : PQgetvalue(r, i, 1);
            const void *bytes = PQgetisnull(r, i, 4) ? NULL : PQgetvalue(r, i, 4);
            size_t nb = bytes ? (size_t)PQgetlength(r, i, 4) : 0;
            if (st->hooks.event)
                st->hooks.event(st->hooks.user, sid, PQgetvalue(r, i, 2), PQgetvalue(r, i, 3),
                                bytes, nb);
        }
        PQclear(r);
        if (n < atoi(EVENT_BATCH))
            return;
    }
}

/* Renew the running job's lease; interrupt it when it is no longer ours or when renewals
 * have failed for 2/3 of a lease (then the job must stop before anyone may take it over). */
static void renew_lease(struct pg_store *st, PGconn *c)
{
    int64_t id = atomic_load(&st->running_id);
    if (!id)
        return;
    char ids[32], lease[16];
    snprintf(ids, sizeof(ids), "%" PRId64, id);
    snprintf(lease, sizeof(lease), "%d", st->lease_s);
    const char *v[3] = {ids, st->worker_id, lease};
    PGresult *r = pg__exec(c,
                           "UPDATE latentd_jobs SET lease_until=now() + make_interval(secs => "
                           "$3::int) WHERE id=$1 AND worker=$2 AND status='running' "
                           "RETURNING interrupt",
                           3, v);
    int lost = r && PQntuples(r) == 0 && atomic_load(&st->running_id) == id;
    int asked = r && PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    if (r && !lost)
        atomic_store(&st->renewed_ms, clock_mono_ms());
    PQclear(r);
    int stale = clock_mono_ms() - atomic_load(&st->renewed_ms) > st->lease_s * 2000 / 3;
    if (lost || stale)
        log_warn("job store: lost the lease of job %" PRId64 "; interrupting it", id);
    if ((lost || stale || asked) && st->hooks.interrupt)
        st->hooks.interrupt(st->hooks.user, id);
}

static void heartbeat(struct pg_store *st, PGconn *c)
{
    char host[64] = "", pid[16];
    gethostname(host, sizeof(host) - 1);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    const char *v[5] = {st->worker_id, host, pid, st->device ? st->device : "",
                        st->worker ? "t" : "f"};
    pg__cmd(c,
            "INSERT INTO latentd_workers(id, host, pid, device, worker) VALUES($1,$2,$3,$4,$5) "
            "ON CONFLICT (id) DO UPDATE SET heartbeat=now()",
            5, v);
}

static void housekeeping(PGconn *c)
{
    pg__cmd(c, "DELETE FROM latentd_events WHERE created < now() - interval '" EVENT_KEEP "'",
            0, NULL);
    pg__cmd(c, "DELETE FROM latentd_workers WHERE heartbeat < now() - interval '1 hour'", 0,
            NULL);
}

/* Read pending notifications; returns a mask: 1 events, 2 jobs. Interrupts go out here. */
static int drain_notifies(struct pg_store *st, PGconn *c)
{
    int mask = 0;
    PGnotify *n;
    PQconsumeInput(c);
    while ((n = PQnotifies(c))) {
        if (strcmp(n->relname, "latentd_events") == 0)
            mask |= 1;
        else if (strcmp(n->relname, "latentd_jobs") == 0)
            mask |= 2;
        else if (strcmp(n->relname, "latentd_interrupt") == 0 && st->hooks.interrupt)
            st->hooks.interrupt(st->hooks.user, strtoll(n->extra, NULL, 10));
        PQfreemem(n);
    }
    return mask;
}

static int reconnect(struct pg_store *st, PGconn *c)
{
    PQreset(c);
    if (PQstatus(c) != CONNECTION_OK || listen_all(c) < 0)
        return -1;
    log_info("job store: watch connection restored");
    return 0;
}

static void *watch_main(void *arg)
{
    struct pg_store *st = arg;
    PGconn *c = PQconnectdb(st->url);
    int tick_ms = st->lease_s * 1000 / 3 < 1000 ? st->lease_s * 1000 / 3 : 1000;
    int64_t next_beat = 0, next_clean = 0;
    if (PQstatus(c) == CONNECTION_OK)
        listen_all(c);
    while (!atomic_load(&st->stop)) {
        if (PQstatus(c) != CONNECTION_OK && reconnect(st, c) < 0) {
            usleep(500 * 1000);
            continue;
        }
        struct pollfd p = {PQsocket(c), POLLIN, 0};
        poll(&p, 1, tick_ms / 4);
        int mask = drain_notifies(st, c);
        int64_t now = clock_mono_ms();
        if (mask & 2 && st->hooks.jobs)
            st->hooks.jobs(st->hooks.user);
        if (now >= next_beat) {
            renew_lease(st, c);
            heartbeat(st, c);
            if (pg__recover_expired(st, c) > 0 && st->hooks.jobs)
                st->hooks.jobs(st->hooks.user);
            next_beat = now + tick_ms;
            mask |= 1; /* poll the events table once per tick regardless */
        }
        if (now >= next_clean) {
            housekeeping(c);
            next_clean = now + 60000;
        }
        if (mask & 1)
            deliver_events(st, c);
    }
    const char *v[1] = {st->worker_id};
    pg__cmd(c, "DELETE FROM latentd_workers WHERE id=$1", 1, v);
    PQfinish(c);
    return NULL;
}

int pg__watch(void *ctx, const struct srv_store_hooks *h, struct err *e)
{
    struct pg_store *st = ctx;
    st->hooks = *h;
    st->device = xstrdup(h->device ? h->device : "");
    st->hooks.device = st->device;
    PGconn *c = pg__take(st);
    PGresult *r = pg__exec(c, "SELECT COALESCE(MAX(id), 0) FROM latentd_events", 0, NULL);
    st->last_event = r && PQntuples(r) ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    PQclear(r);
    heartbeat(st, c); /* listed from the moment the process serves */
    pg__give(st, c);
    if (pthread_create(&st->watch_thread, NULL, watch_main, st) != 0)
        return err_set(e, ERR_INTERNAL, "cannot start the job store's watch thread");
    st->watching = 1;
    return 0;
}

void pg__watch_stop(void *ctx)
{
    struct pg_store *st = ctx;
    if (!st->watching)
        return;
    atomic_store(&st->stop, 1);
    pthread_join(st->watch_thread, NULL);
    st->watching = 0;
}

/* A job whose worker died: queued again, or failed once it has started MAX times. */
static void recover_row(struct pg_store *st, PGconn *c, PGresult *r, int i)
{
    const char *id = PQgetvalue(r, i, 0), *pid = PQgetvalue(r, i, 1);
    int attempts = atoi(PQgetvalue(r, i, 3));
    const char *client = PQgetisnull(r, i, 4) ? NULL : PQgetvalue(r, i, 4);
    const char *v[1] = {id};
    if (attempts < SRV_STORE_MAX_ATTEMPTS) {
        log_warn("job store: the worker running prompt '%s' stopped renewing its lease; "
                 "queued again (start %d of at most %d)", pid, attempts + 1,
                 SRV_STORE_MAX_ATTEMPTS);
        pg__cmd(c, "UPDATE latentd_jobs SET status='pending', worker=NULL, lease_until=NULL "
                   "WHERE id=$1", 1, v);
        return;
    }
    char why[192];
    snprintf(why, sizeof(why),
             "the worker running this prompt died each of the %d times it started; it is not "
             "run again\n", attempts);
    char *text = srv_store__stopped_messages(pid, strtoll(PQgetvalue(r, i, 2), NULL, 10), why);
    log_warn("job store: prompt '%s' was running on a worker that died, each of the %d times "
             "it started; marked as failed instead of running it again", pid, attempts);
    pg__finish_row(c, strtoll(id, NULL, 10), "error", "{}", text, "{}");
    /* Its client is told the way a failed prompt tells it (the error, then idle). */
    cJSON *msgs = cJSON_Parse(text);
    cJSON *err = cJSON_GetArrayItem(cJSON_GetArrayItem(msgs, 1), 1);
    char *data = err ? cJSON_PrintUnformatted(err) : NULL;
    if (client && data) {
        pg__publish(c, client, "execution_error", data, NULL, 0);
        char fin[512];
        snprintf(fin, sizeof(fin), "{\"node\":null,\"prompt_id\":\"%.400s\"}", pid);
        pg__publish(c, client, "executing", fin, NULL, 0);
    }
    cJSON_free(data);
    cJSON_Delete(msgs);
    cJSON_free(text);
}

int pg__recover_expired(struct pg_store *st, PGconn *c)
{
    if (pg__cmd(c, "BEGIN", 0, NULL) < 0)
        return 0;
    /* SKIP LOCKED: two processes sweeping at once split the rows instead of waiting. */
    PGresult *r = pg__exec(c,
                           "SELECT id, prompt_id, COALESCE(started_ms, created_ms), attempts, "
                           "client_id FROM latentd_jobs WHERE status='running' AND "
                           "lease_until < now() ORDER BY id FOR UPDATE SKIP LOCKED",
                           0, NULL);
    int n = r ? PQntuples(r) : 0;
    for (int i = 0; i < n; i++)
        recover_row(st, c, r, i);
    PQclear(r);
    if (n > 0) {
        pg__publish_status(c);
        pg__cmd(c, "NOTIFY latentd_jobs", 0, NULL);
    }
    if (pg__cmd(c, "COMMIT", 0, NULL) < 0)
        PQclear(PQexec(c, "ROLLBACK"));
    return n;
}

cJSON *pg__workers(void *ctx)
{
    struct pg_store *st = ctx;
    char live[16];
    snprintf(live, sizeof(live), "%d", st->lease_s);
    const char *v[1] = {live};
    PGconn *c = pg__take(st);
    PGresult *r = pg__exec(c,
                           "SELECT w.id, w.host, w.pid, w.device, w.worker, "
                           "(extract(epoch FROM w.started) * 1000)::bigint, "
                           "(SELECT prompt_id FROM latentd_jobs j WHERE j.worker=w.id AND "
                           "j.status='running' LIMIT 1) FROM latentd_workers w "
                           "WHERE w.heartbeat > now() - make_interval(secs => $1::int) "
                           "ORDER BY w.started, w.id",
                           1, v);
    pg__give(st, c);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; r && i < PQntuples(r); i++) {
        cJSON *w = cJSON_CreateObject();
        cJSON_AddStringToObject(w, "id", PQgetvalue(r, i, 0));
        cJSON_AddStringToObject(w, "host", PQgetvalue(r, i, 1));
        cJSON_AddNumberToObject(w, "pid", atoi(PQgetvalue(r, i, 2)));
        cJSON_AddStringToObject(w, "device", PQgetvalue(r, i, 3));
        cJSON_AddBoolToObject(w, "worker", strcmp(PQgetvalue(r, i, 4), "t") == 0);
        cJSON_AddNumberToObject(w, "started", strtod(PQgetvalue(r, i, 5), NULL));
        if (PQgetisnull(r, i, 6))
            cJSON_AddNullToObject(w, "running");
        else
            cJSON_AddStringToObject(w, "running", PQgetvalue(r, i, 6));
        cJSON_AddBoolToObject(w, "self", strcmp(PQgetvalue(r, i, 0), st->worker_id) == 0);
        cJSON_AddItemToArray(a, w);
    }
    PQclear(r);
    return a;
}
