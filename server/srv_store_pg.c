/*
 * The PostgreSQL backend of the job store: connections, schema, submit, claim, finish and
 * the queue view. The design is in srv_store_pg.h.
 */
#include "srv_store_pg.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "graph.h"
#include "log.h"

/*
 * Created under an advisory lock: several processes starting at once would otherwise race
 * on CREATE ... IF NOT EXISTS (it is not atomic against a concurrent create). Later
 * versions migrate with ADD COLUMN IF NOT EXISTS below the CREATEs.
 */
static const char *const schema =
    "CREATE SEQUENCE IF NOT EXISTS latentd_counter MINVALUE 0 START 0;"
    "CREATE SEQUENCE IF NOT EXISTS latentd_history_seq;"
    "CREATE SEQUENCE IF NOT EXISTS latentd_event_seq;"
    "CREATE TABLE IF NOT EXISTS latentd_jobs("
    " id BIGSERIAL PRIMARY KEY,"
    " prompt_id TEXT NOT NULL,"
    " number DOUBLE PRECISION NOT NULL,"
    " number_text TEXT NOT NULL,"
    " prompt TEXT NOT NULL,"
    " extra_data TEXT NOT NULL,"
    " outputs_to_execute TEXT NOT NULL,"
    " client_id TEXT,"
    " status TEXT NOT NULL," /* pending|running|success|error|interrupted */
    " outputs TEXT, messages TEXT, meta TEXT,"
    " created_ms BIGINT, started_ms BIGINT, completed_ms BIGINT,"
    " history_seq BIGINT,"
    " attempts INTEGER NOT NULL DEFAULT 0);"
    "ALTER TABLE latentd_jobs ADD COLUMN IF NOT EXISTS worker TEXT;"
    "ALTER TABLE latentd_jobs ADD COLUMN IF NOT EXISTS lease_until TIMESTAMPTZ;"
    "ALTER TABLE latentd_jobs ADD COLUMN IF NOT EXISTS interrupt BOOLEAN NOT NULL DEFAULT FALSE;"
    /* Model affinity: the files a job names, and those a worker's last job named. */
    "ALTER TABLE latentd_jobs ADD COLUMN IF NOT EXISTS models TEXT[] NOT NULL DEFAULT '{}';"
    "CREATE INDEX IF NOT EXISTS latentd_jobs_pending ON latentd_jobs"
    " (number, prompt_id COLLATE \"C\", id) WHERE status='pending';"
    "CREATE INDEX IF NOT EXISTS latentd_jobs_running ON latentd_jobs(lease_until)"
    " WHERE status='running';"
    "CREATE INDEX IF NOT EXISTS latentd_jobs_history ON latentd_jobs(history_seq)"
    " WHERE history_seq IS NOT NULL;"
    "CREATE INDEX IF NOT EXISTS latentd_jobs_prompt ON latentd_jobs(prompt_id);"
    "CREATE TABLE IF NOT EXISTS latentd_events("
    " id BIGINT PRIMARY KEY, sid TEXT, type TEXT NOT NULL, data TEXT NOT NULL, bytes BYTEA,"
    " created TIMESTAMPTZ NOT NULL DEFAULT now());"
    "CREATE TABLE IF NOT EXISTS latentd_workers("
    " id TEXT PRIMARY KEY, host TEXT, pid INTEGER, device TEXT, worker BOOLEAN,"
    " started TIMESTAMPTZ NOT NULL DEFAULT now(), heartbeat TIMESTAMPTZ NOT NULL DEFAULT now());"
    "ALTER TABLE latentd_workers ADD COLUMN IF NOT EXISTS models TEXT[] NOT NULL DEFAULT '{}';"
    "CREATE TABLE IF NOT EXISTS latentd_files("
    " type TEXT NOT NULL, subfolder TEXT NOT NULL, filename TEXT NOT NULL, data BYTEA NOT NULL,"
    " created TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY(type, subfolder, filename));"
    /* One round trip per event: the lock serialises id allocation with commit order. */
    "CREATE OR REPLACE FUNCTION latentd_publish(p_sid TEXT, p_type TEXT, p_data TEXT,"
    " p_bytes BYTEA) RETURNS BIGINT LANGUAGE plpgsql AS $$"
    " DECLARE n BIGINT; BEGIN"
    "  PERFORM pg_advisory_xact_lock(7273100);"
    "  n := nextval('latentd_event_seq');"
    "  INSERT INTO latentd_events(id, sid, type, data, bytes) VALUES(n, p_sid, p_type, p_data,"
    "   p_bytes);"
    "  PERFORM pg_notify('latentd_events', '');"
    "  RETURN n; END $$;"
    /* A submit in one round trip (its own transaction): the row, the queue count as a
     * "status" event ordered before anything a worker publishes for the job (which it
     * cannot see before this commits), and the wake-up for idle workers. */
    "CREATE OR REPLACE FUNCTION latentd_submit(p_prompt_id TEXT, p_number DOUBLE PRECISION,"
    " p_number_text TEXT, p_prompt TEXT, p_extra TEXT, p_outputs TEXT, p_client TEXT,"
    " p_created BIGINT, p_models TEXT) RETURNS BIGINT LANGUAGE plpgsql AS $$"
    " DECLARE n BIGINT; q BIGINT; BEGIN"
    "  INSERT INTO latentd_jobs(prompt_id, number, number_text, prompt, extra_data,"
    "   outputs_to_execute, client_id, status, created_ms, models) VALUES(p_prompt_id,"
    "   p_number, p_number_text, p_prompt, p_extra, p_outputs, p_client, 'pending', p_created,"
    "   string_to_array(p_models, E'\\n')) RETURNING id INTO n;"
    "  SELECT count(*) INTO q FROM latentd_jobs WHERE status IN ('pending','running');"
    "  PERFORM latentd_publish(NULL, 'status',"
    "   '{\"status\":{\"exec_info\":{\"queue_remaining\":' || q || '}}}', NULL);"
    "  PERFORM pg_notify('latentd_jobs', '');"
    "  RETURN n; END $$;";

#define SCHEMA_LOCK "7273099"

PGresult *pg__exec(PGconn *c, const char *sql, int n, const char *const *vals)
{
    PGresult *r = PQexecParams(c, sql, n, NULL, vals, NULL, NULL, 0);
    ExecStatusType t = PQresultStatus(r);
    if (t == PGRES_TUPLES_OK || t == PGRES_COMMAND_OK)
        return r;
    log_error("job store: postgresql: %s", PQerrorMessage(c));
    PQclear(r);
    return NULL;
}

int pg__cmd(PGconn *c, const char *sql, int n, const char *const *vals)
{
    PGresult *r = pg__exec(c, sql, n, vals);
    PQclear(r);
    return r ? 0 : ERR_IO;
}

static PGconn *connect_one(const char *url, struct err *e)
{
    PGconn *c = PQconnectdb(url);
    if (PQstatus(c) != CONNECTION_OK) {
        if (e)
            err_set(e, ERR_IO, "cannot connect to job store: %s", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    PQclear(PQexec(c, "SET client_min_messages=warning"));
    return c;
}

PGconn *pg__take(struct pg_store *st)
{
    pthread_mutex_lock(&st->pool_lock);
    int i;
    for (;;) {
        for (i = 0; i < PG_POOL && st->busy[i]; i++)
            ;
        if (i < PG_POOL)
            break;
        pthread_cond_wait(&st->pool_cond, &st->pool_lock);
    }
    st->busy[i] = 1;
    pthread_mutex_unlock(&st->pool_lock);
    /* A server restart breaks every connection: reset on first use after it. */
    if (PQstatus(st->conns[i]) != CONNECTION_OK) {
        PQreset(st->conns[i]);
        if (PQstatus(st->conns[i]) == CONNECTION_OK)
            log_info("job store: reconnected to postgresql");
    }
    return st->conns[i];
}

void pg__give(struct pg_store *st, PGconn *c)
{
    pthread_mutex_lock(&st->pool_lock);
    for (int i = 0; i < PG_POOL; i++)
        if (st->conns[i] == c)
            st->busy[i] = 0;
    pthread_cond_signal(&st->pool_cond);
    pthread_mutex_unlock(&st->pool_lock);
}

int pg__publish(PGconn *c, const char *sid, const char *type, const char *data,
                const void *bytes, size_t n)
{
    const char *vals[4] = {sid, type, data ? data : "{}", (const char *)bytes};
    int lens[4] = {0, 0, 0, (int)n};
    int fmts[4] = {0, 0, 0, 1};
    PGresult *r = PQexecParams(c, "SELECT latentd_publish($1, $2, $3, $4)", 4, NULL, vals, lens,
                               fmts, 0);
    int ok = PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok)
        log_error("job store: cannot publish '%s': %s", type, PQerrorMessage(c));
    PQclear(r);
    return ok ? 0 : ERR_IO;
}

static int count_remaining(PGconn *c)
{
    PGresult *r = pg__exec(c, "SELECT count(*) FROM latentd_jobs WHERE status IN "
                              "('pending','running')", 0, NULL);
    int n = r && PQntuples(r) ? atoi(PQgetvalue(r, 0, 0)) : 0;
    PQclear(r);
    return n;
}

int pg__publish_status(PGconn *c)
{
    char data[128];
    snprintf(data, sizeof(data), "{\"status\":{\"exec_info\":{\"queue_remaining\":%d}}}",
             count_remaining(c));
    return pg__publish(c, NULL, "status", data, NULL, 0);
}

static void pg_close(void *ctx)
{
    struct pg_store *st = ctx;
    if (!st)
        return;
    pg__watch_stop(st);
    for (int i = 0; i < PG_POOL; i++)
        PQfinish(st->conns[i]);
    pthread_cond_destroy(&st->pool_cond);
    pthread_mutex_destroy(&st->pool_lock);
    xfree(st->url);
    xfree(st->device);
    xfree(st);
}

static int create_schema(PGconn *c, struct err *e)
{
    PQclear(PQexec(c, "SELECT pg_advisory_lock(" SCHEMA_LOCK ")"));
    PGresult *r = PQexec(c, schema);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok)
        err_set(e, ERR_IO, "cannot initialise job store: %s", PQerrorMessage(c));
    PQclear(r);
    PQclear(PQexec(c, "SELECT pg_advisory_unlock(" SCHEMA_LOCK ")"));
    return ok ? 0 : ERR_IO;
}

void *srv_store__pg_open(const char *url, const struct srv_store_options *o, struct err *e)
{
    struct pg_store *st = xcalloc(1, sizeof(*st));
    pthread_mutex_init(&st->pool_lock, NULL);
    pthread_cond_init(&st->pool_cond, NULL);
    st->url = xstrdup(url);
    st->worker = o->worker;
    st->lease_s = o->lease_s > 0 ? o->lease_s : SRV_STORE_LEASE_S;
    st->affinity_s = o->affinity_s >= 0 ? o->affinity_s : SRV_STORE_AFFINITY_S;
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    srand((unsigned)(clock_wall_ms() ^ getpid()));
    snprintf(st->worker_id, sizeof(st->worker_id), "%s:%d:%04x", host, (int)getpid(),
             (unsigned)rand() & 0xffff);
    for (int i = 0; i < PG_POOL; i++)
        if (!(st->conns[i] = connect_one(url, e)))
            goto fail;
    if (create_schema(st->conns[0], e) < 0)
        goto fail;
    pg__recover_expired(st, st->conns[0]);
    return st;
fail:
    pg_close(st);
    return NULL;
}

static int pg_add(void *ctx, struct srv_store_job *j, struct err *e)
{
    struct pg_store *st = ctx;
    char number[64], created[32];
    snprintf(number, sizeof(number), "%.17g", j->number);
    snprintf(created, sizeof(created), "%" PRId64, clock_wall_ms());
    const char *v[9] = {j->prompt_id, number, j->number_text, j->prompt, j->extra_data,
                        j->outputs_to_execute, j->client_id, created, j->models ? j->models : ""};
    PGconn *c = pg__take(st);
    int rc = ERR_IO;
    /* One round trip (was six: BEGIN, INSERT, count, publish, NOTIFY, COMMIT). */
    PGresult *r = pg__exec(c, "SELECT latentd_submit($1,$2,$3,$4,$5,$6,$7,$8,$9)", 9, v);
    if (r && PQntuples(r) == 1) {
        j->id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        rc = 0;
    } else {
        err_set(e, ERR_IO, "cannot store job: %s", PQerrorMessage(c));
    }
    PQclear(r);
    pg__give(st, c);
    return rc;
}

static int64_t pg_next_counter(void *ctx)
{
    return 0; /* numbers come from the latentd_counter sequence (pg_take_number) */
}

static int64_t pg_take_number(void *ctx, int front)
{
    struct pg_store *st = ctx;
    PGconn *c = pg__take(st);
    PGresult *r = pg__exec(c, "SELECT nextval('latentd_counter')", 0, NULL);
    int64_t n = r && PQntuples(r) ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    PQclear(r);
    pg__give(st, c);
    return front ? -n : n;
}

static char *val_dup(PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : xstrdup(PQgetvalue(r, row, col));
}

/*
 * The claim: the first pending job in ComfyUI's queue order, with one exception (model
 * affinity). Among the first AFFINITY_WINDOW pending jobs, one that names models
 * (checkpoint, LoRA...) which this worker does not hold but another live worker does
 * (the models of the last job each ran: its executor keeps them loaded) is left to
 * that worker, for at most affinity_s seconds after it was queued (by the front's
 * clock: hosts are assumed to keep time); then anyone takes it, so nothing starves.
 * When every candidate is left to others this worker takes nothing and polls again.
 * A single worker, or jobs naming no models, get plain FIFO.
 */
#define AFFINITY_WINDOW "8"

static const char *const claim_sql =
    "UPDATE latentd_jobs SET status='running', worker=$1, attempts=attempts+1, "
    "started_ms=$2, interrupt=FALSE, lease_until=now() + make_interval(secs => $3::int) "
    "WHERE id = (SELECT j.id FROM latentd_jobs j WHERE j.status='pending' AND j.id IN "
    " (SELECT id FROM latentd_jobs WHERE status='pending' "
    "  ORDER BY number, prompt_id COLLATE \"C\", id LIMIT " AFFINITY_WINDOW ") "
    " AND NOT (cardinality(j.models) > 0 AND j.created_ms > $2::bigint - 1000 * $4::bigint "
    "  AND NOT EXISTS (SELECT 1 FROM latentd_workers me WHERE me.id=$1 AND "
    "   me.models @> j.models) "
    "  AND EXISTS (SELECT 1 FROM latentd_workers w WHERE w.id <> $1 AND w.worker AND "
    "   w.heartbeat > now() - make_interval(secs => $3::int) AND w.models @> j.models)) "
    " ORDER BY j.number, j.prompt_id COLLATE \"C\", j.id LIMIT 1 FOR UPDATE OF j SKIP LOCKED) "
    "RETURNING id, prompt_id, number, number_text, prompt, extra_data, "
    "outputs_to_execute, client_id";

static int pg_claim(void *ctx, struct srv_store_job *out)
{
    struct pg_store *st = ctx;
    if (!st->worker)
        return 0;
    char started[32], lease[16], wait[16];
    snprintf(started, sizeof(started), "%" PRId64, clock_wall_ms());
    snprintf(lease, sizeof(lease), "%d", st->lease_s);
    snprintf(wait, sizeof(wait), "%d", st->affinity_s);
    const char *v[4] = {st->worker_id, started, lease, wait};
    PGconn *c = pg__take(st);
    /* Counted (attempts) and leased in the claim's own commit, before the job runs. */
    PGresult *r = pg__exec(c, claim_sql, 4, v);
    int got = r && PQntuples(r) == 1;
    if (got) {
        out->id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        out->prompt_id = val_dup(r, 0, 1);
        out->number = strtod(PQgetvalue(r, 0, 2), NULL);
        out->number_text = val_dup(r, 0, 3);
        out->prompt = val_dup(r, 0, 4);
        out->extra_data = val_dup(r, 0, 5);
        out->outputs_to_execute = val_dup(r, 0, 6);
        out->client_id = val_dup(r, 0, 7);
        atomic_store(&st->renewed_ms, clock_mono_ms());
        atomic_store(&st->running_id, out->id);
    }
    PQclear(r);
    pg__give(st, c);
    return r ? got : ERR_IO;
}

static int pg_mark_running(void *ctx, int64_t id)
{
    return 0; /* pg_claim did it */
}

static int pg_finish(void *ctx, int64_t id, const char *status_str, const char *outputs,
                     const char *messages, const char *meta)
{
    struct pg_store *st = ctx;
    char ids[32];
    snprintf(ids, sizeof(ids), "%" PRId64, id);
    const char *v[2] = {ids, st->worker_id};
    /* Renewals stop first: one that ran after this commit would find the row no longer
     * running, take the lease for lost and interrupt whatever this worker runs next. */
    atomic_store(&st->running_id, 0);
    PGconn *c = pg__take(st);
    int rc = ERR_IO;
    PGresult *r = NULL;
    if (pg__cmd(c, "BEGIN", 0, NULL) < 0)
        goto out;
    /* The fence: only the holder of the job's lease writes its history. */
    r = pg__exec(c, "SELECT 1 FROM latentd_jobs WHERE id=$1 AND worker=$2 AND "
                    "status='running' FOR UPDATE", 2, v);
    if (!r)
        goto out;
    if (PQntuples(r) == 0) {
        log_warn("job store: job %s was taken over (its lease ran out); result dropped", ids);
        rc = ERR_BUSY;
        goto out;
    }
    /* What this worker now holds loaded, for the claims' model affinity. */
    if (pg__finish_row(c, id, status_str, outputs, messages, meta) < 0 ||
        pg__cmd(c, "UPDATE latentd_workers SET models=(SELECT models FROM latentd_jobs "
                   "WHERE id=$1) WHERE id=$2", 2, v) < 0 ||
        pg__cmd(c, "COMMIT", 0, NULL) < 0)
        goto out;
    rc = 0;
out:
    if (rc < 0)
        PQclear(PQexec(c, "ROLLBACK"));
    PQclear(r);
    pg__give(st, c);
    return rc;
}

static int pg_delete_pending(void *ctx, int64_t id)
{
    struct pg_store *st = ctx;
    char ids[32];
    snprintf(ids, sizeof(ids), "%" PRId64, id);
    const char *v[1] = {ids};
    PGconn *c = pg__take(st);
    int rc = pg__cmd(c, "DELETE FROM latentd_jobs WHERE id=$1 AND status='pending'", 1, v);
    pg__give(st, c);
    return rc;
}

static int pg_remove_pending(void *ctx, int clear, const cJSON *ids)
{
    struct pg_store *st = ctx;
    PGconn *c = pg__take(st);
    int n = 0;
    if (clear) {
        PGresult *r = pg__exec(c, "DELETE FROM latentd_jobs WHERE status='pending'", 0, NULL);
        n += r ? atoi(PQcmdTuples(r)) : 0;
        PQclear(r);
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, ids)
    {
        if (!cJSON_IsString(it))
            continue;
        const char *v[1] = {it->valuestring};
        PGresult *r = pg__exec(c, "DELETE FROM latentd_jobs WHERE status='pending' AND "
                                  "prompt_id=$1", 1, v);
        n += r ? atoi(PQcmdTuples(r)) : 0;
        PQclear(r);
    }
    if (n > 0)
        pg__publish_status(c);
    pg__give(st, c);
    return n;
}

/* One 5-element queue item: [number, prompt_id, prompt, extra_data, outputs]. */
static cJSON *queue_item(PGresult *r, int row)
{
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateRaw(PQgetvalue(r, row, 1)));
    cJSON_AddItemToArray(a, cJSON_CreateString(PQgetvalue(r, row, 2)));
    for (int col = 3; col <= 5; col++) {
        const char *t = PQgetvalue(r, row, col);
        cJSON *j = graph_json_parse(t, strlen(t)); /* exact 64-bit seeds */
        cJSON_AddItemToArray(a, j ? j : (col == 5 ? cJSON_CreateArray() : cJSON_CreateObject()));
    }
    return a;
}

static cJSON *pg_queue_json(void *ctx)
{
    struct pg_store *st = ctx;
    cJSON *o = cJSON_CreateObject();
    cJSON *running = cJSON_AddArrayToObject(o, "queue_running");
    cJSON *pending = cJSON_AddArrayToObject(o, "queue_pending");
    PGconn *c = pg__take(st);
    PGresult *r = pg__exec(c,
                           "SELECT status, number_text, prompt_id, prompt, extra_data, "
                           "outputs_to_execute FROM latentd_jobs WHERE status IN "
                           "('pending','running') ORDER BY number, prompt_id COLLATE \"C\", id",
                           0, NULL);
    pg__give(st, c);
    for (int i = 0; r && i < PQntuples(r); i++)
        cJSON_AddItemToArray(strcmp(PQgetvalue(r, i, 0), "running") == 0 ? running : pending,
                             queue_item(r, i));
    PQclear(r);
    return o;
}

static int pg_remaining(void *ctx)
{
    struct pg_store *st = ctx;
    PGconn *c = pg__take(st);
    int n = count_remaining(c);
    pg__give(st, c);
    return n;
}

static int pg_interrupt(void *ctx, const char *prompt_id)
{
    struct pg_store *st = ctx;
    const char *v[1] = {prompt_id};
    PGconn *c = pg__take(st);
    /* The flag is also read by lease renewal, in case the NOTIFY is missed. */
    int rc = pg__cmd(c,
                     "WITH u AS (UPDATE latentd_jobs SET interrupt=TRUE WHERE status='running' "
                     "AND ($1::text IS NULL OR prompt_id=$1) RETURNING id) "
                     "SELECT pg_notify('latentd_interrupt', id::text) FROM u",
                     1, v);
    pg__give(st, c);
    return rc;
}

static int pg_publish(void *ctx, const char *sid, const char *type, const char *data,
                      const void *bytes, size_t n)
{
    struct pg_store *st = ctx;
    PGconn *c = pg__take(st);
    int rc = strcmp(type, "status") == 0 && !data ? pg__publish_status(c)
                                                  : pg__publish(c, sid, type, data, bytes, n);
    pg__give(st, c);
    return rc;
}

static int pg_file_put(void *ctx, const char *type, const char *subfolder, const char *name,
                       const void *bytes, size_t n)
{
    struct pg_store *st = ctx;
    const char *vals[4] = {type, subfolder, name, (const char *)bytes};
    int lens[4] = {0, 0, 0, (int)n};
    int fmts[4] = {0, 0, 0, 1};
    PGconn *c = pg__take(st);
    PGresult *r = PQexecParams(c,
                               "INSERT INTO latentd_files(type, subfolder, filename, data) "
                               "VALUES($1,$2,$3,$4) ON CONFLICT (type, subfolder, filename) "
                               "DO UPDATE SET data=EXCLUDED.data, created=now()",
                               4, NULL, vals, lens, fmts, 0);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        log_error("job store: cannot store '%s': %s", name, PQerrorMessage(c));
    PQclear(r);
    pg__give(st, c);
    return ok ? 0 : ERR_IO;
}

static int pg_file_get(void *ctx, const char *type, const char *subfolder, const char *name,
                       void **bytes, size_t *n)
{
    struct pg_store *st = ctx;
    const char *vals[3] = {type, subfolder, name};
    PGconn *c = pg__take(st);
    /* Binary result: the bytes as stored, no hex round trip. */
    PGresult *r = PQexecParams(c, "SELECT data FROM latentd_files WHERE type=$1 AND "
                                  "subfolder=$2 AND filename=$3", 3, NULL, vals, NULL, NULL, 1);
    int rc = ERR_NOT_FOUND;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
        *n = (size_t)PQgetlength(r, 0, 0);
        *bytes = xmalloc(*n + 1);
        memcpy(*bytes, PQgetvalue(r, 0, 0), *n);
        rc = 0;
    }
    PQclear(r);
    pg__give(st, c);
    return rc;
}

const struct srv_store_ops srv_store__pg_ops = {
    .name = "postgresql",
    .close = pg_close,
    .add = pg_add,
    .load_pending = NULL, /* the queue is the table */
    .next_counter = pg_next_counter,
    .mark_running = pg_mark_running,
    .finish = pg_finish,
    .delete_pending = pg_delete_pending,
    .history = pg__history,
    .history_one = pg__history_one,
    .history_clear = pg__history_clear,
    .history_delete = pg__history_delete,
    .history_count = pg__history_count,
    .take_number = pg_take_number,
    .claim = pg_claim,
    .remove_pending = pg_remove_pending,
    .queue_json = pg_queue_json,
    .remaining = pg_remaining,
    .interrupt = pg_interrupt,
    .publish = pg_publish,
    .workers = pg__workers,
    .watch = pg__watch,
    .unwatch = pg__watch_stop,
    .file_put = pg_file_put,
    .file_get = pg_file_get,
};
