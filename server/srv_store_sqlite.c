/*
 * The SQLite backend of the job store (srv_store.h): one process owns the database file
 * (srv_dblock), WAL mode, one connection behind one mutex (a leaf lock).
 */
#include "clock.h"
#include "srv_store.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "graph.h"
#include "log.h"
#include "srv_dblock.h"

struct sq_store {
    sqlite3 *db;
    pthread_mutex_t lock; /* leaf: guards db */
    int dblock_fd;        /* srv_dblock: no second process on this database */
};

static const char *const schema =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;" /* WAL + NORMAL survives a process crash (kill -9) */
    "CREATE TABLE IF NOT EXISTS jobs("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " prompt_id TEXT NOT NULL,"
    " number REAL NOT NULL,"
    " number_text TEXT NOT NULL,"
    " prompt TEXT NOT NULL,"
    " extra_data TEXT NOT NULL,"
    " outputs_to_execute TEXT NOT NULL,"
    " client_id TEXT,"
    " status TEXT NOT NULL," /* pending|running|success|error|interrupted */
    " outputs TEXT, messages TEXT, meta TEXT,"
    " created_ms INTEGER, started_ms INTEGER, completed_ms INTEGER,"
    " history_seq INTEGER,"
    " attempts INTEGER NOT NULL DEFAULT 0);" /* times it started running */
    "CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status);"
    "CREATE INDEX IF NOT EXISTS jobs_history ON jobs(history_seq);";

static char *col_dup(sqlite3_stmt *s, int i)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? xstrdup((const char *)t) : NULL;
}

static int64_t next_history_seq(struct sq_store *st)
{
    sqlite3_stmt *s;
    int64_t seq = 1;
    if (sqlite3_prepare_v2(st->db, "SELECT COALESCE(MAX(history_seq),0)+1 FROM jobs", -1, &s,
                           NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW)
            seq = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    return seq;
}

/* Drop older finished rows with the same prompt_id, and history beyond the cap. */
static void history_trim(struct sq_store *st, int64_t id)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->db,
                           "DELETE FROM jobs WHERE id<>?1 AND history_seq IS NOT NULL AND "
                           "prompt_id=(SELECT prompt_id FROM jobs WHERE id=?1)",
                           -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, id);
        sqlite3_step(s);
        sqlite3_finalize(s);
    }
    char sql[256];
    snprintf(sql, sizeof(sql),
             "DELETE FROM jobs WHERE history_seq IS NOT NULL AND history_seq <= "
             "(SELECT MAX(history_seq) FROM jobs) - %d",
             SRV_STORE_HISTORY_MAX);
    sqlite3_exec(st->db, sql, NULL, NULL, NULL);
}

static int finish_locked(struct sq_store *st, int64_t id, const char *status_str,
                         const char *outputs, const char *messages, const char *meta)
{
    /* Secrets for API nodes are stripped before the job becomes history (comfy-api §3.5). */
    char *extra = NULL;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->db, "SELECT extra_data FROM jobs WHERE id=?", -1, &s, NULL) ==
        SQLITE_OK) {
        sqlite3_bind_int64(s, 1, id);
        if (sqlite3_step(s) == SQLITE_ROW)
            extra = srv_store__strip_secrets((const char *)sqlite3_column_text(s, 0));
        sqlite3_finalize(s);
    }
    int rc = -1;
    if (sqlite3_prepare_v2(st->db,
                           "UPDATE jobs SET status=?, outputs=?, messages=?, meta=?, "
                           "completed_ms=?, history_seq=?, extra_data=COALESCE(?, extra_data) "
                           "WHERE id=?",
                           -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, status_str, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 2, outputs ? outputs : "{}", -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 3, messages ? messages : "[]", -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, meta ? meta : "{}", -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 5, clock_wall_ms());
        sqlite3_bind_int64(s, 6, next_history_seq(st));
        if (extra)
            sqlite3_bind_text(s, 7, extra, -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(s, 7);
        sqlite3_bind_int64(s, 8, id);
        rc = sqlite3_step(s) == SQLITE_DONE ? 0 : -1;
        sqlite3_finalize(s);
    }
    if (rc == 0)
        history_trim(st, id);
    else
        log_error("job store: cannot finish job %lld: %s", (long long)id, sqlite3_errmsg(st->db));
    xfree(extra);
    return rc < 0 ? ERR_IO : 0;
}

/* Run `sql` with ?1 = id and ?2 = now (ms); the caller holds the lock (or is opening). */
static int exec_id_locked(struct sq_store *st, const char *sql, int64_t id)
{
    sqlite3_stmt *s;
    int rc = ERR_IO;
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_int64(s, 2, clock_wall_ms());
        if (sqlite3_step(s) == SQLITE_DONE)
            rc = 0;
        sqlite3_finalize(s);
    }
    return rc;
}

/*
 * Jobs a dead process left behind. A job "running" at the crash may not be to blame
 * (kill -9, power, a deploy), so it goes back to the queue in its place; but one that
 * has started SRV_STORE_MAX_ATTEMPTS times already is most likely what killed the
 * process each time (a request that aborts it), and running it again at every
 * start would be a crash loop: it becomes a failed history entry saying why.
 */
static void recover_one(struct sq_store *st, int64_t id, const char *pid, int64_t started,
                        int attempts)
{
    if (attempts < SRV_STORE_MAX_ATTEMPTS) {
        log_warn("job store: prompt '%s' was running when latentd stopped; queued again "
                 "(start %d of at most %d)", pid, attempts + 1, SRV_STORE_MAX_ATTEMPTS);
        exec_id_locked(st, "UPDATE jobs SET status='pending' WHERE id=?1 AND ?2 IS NOT NULL", id);
        return;
    }
    char why[192];
    snprintf(why, sizeof(why),
             "latentd stopped while this prompt was running, each of the %d times it started; "
             "it is not run again\n", attempts);
    char *text = srv_store__stopped_messages(pid, started, why);
    log_warn("job store: prompt '%s' was running each of the %d times latentd stopped; marked "
             "as failed instead of running it again", pid, attempts);
    finish_locked(st, id, "error", "{}", text, "{}");
    cJSON_free(text);
}

static void recover_running(struct sq_store *st)
{
    struct row {
        int64_t id, started;
        char *pid;
        int attempts;
    } *rows = NULL;
    int n = 0, cap = 0;
    sqlite3_stmt *s;
    /* Collected first: the updates below change the rows this query walks. */
    if (sqlite3_prepare_v2(st->db,
                           "SELECT id, prompt_id, COALESCE(started_ms, created_ms), attempts "
                           "FROM jobs WHERE status='running' OR "
                           "(status='pending' AND attempts>=?1) ORDER BY id",
                           -1, &s, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_int(s, 1, SRV_STORE_MAX_ATTEMPTS);
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (n == cap)
            rows = xrealloc(rows, (size_t)(cap = cap ? 2 * cap : 8) * sizeof(*rows));
        rows[n].id = sqlite3_column_int64(s, 0);
        rows[n].pid = col_dup(s, 1);
        rows[n].started = sqlite3_column_int64(s, 2);
        rows[n++].attempts = sqlite3_column_int(s, 3);
    }
    sqlite3_finalize(s);
    for (int i = 0; i < n; i++) {
        recover_one(st, rows[i].id, rows[i].pid ? rows[i].pid : "", rows[i].started,
                    rows[i].attempts);
        xfree(rows[i].pid);
    }
    xfree(rows);
}

/* Databases made before the attempts column get it (SQLite has no ADD COLUMN IF NOT
 * EXISTS: the error for a column already there is the expected case). */
static void migrate(struct sq_store *st)
{
    sqlite3_exec(st->db, "ALTER TABLE jobs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0",
                 NULL, NULL, NULL);
}

static void sq_close(void *ctx);

void *srv_store__sqlite_open(const char *path, struct err *e)
{
    struct sq_store *st = xcalloc(1, sizeof(*st));
    pthread_mutex_init(&st->lock, NULL);
    if (srv_dblock_take(path, &st->dblock_fd, e) < 0)
        goto fail;
    if (sqlite3_open_v2(path, &st->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                        NULL) != SQLITE_OK) {
        err_set(e, ERR_IO, "cannot open job store '%s': %s", path,
                st->db ? sqlite3_errmsg(st->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(st->db, 5000);
    char *msg = NULL;
    if (sqlite3_exec(st->db, schema, NULL, NULL, &msg) != SQLITE_OK) {
        err_set(e, ERR_IO, "cannot initialise job store '%s': %s", path, msg ? msg : "?");
        sqlite3_free(msg);
        goto fail;
    }
    migrate(st);
    recover_running(st);
    return st;
fail:
    sq_close(st);
    return NULL;
}

static void sq_close(void *ctx)
{
    struct sq_store *st = ctx;
    if (!st)
        return;
    if (st->db)
        sqlite3_close(st->db);
    srv_dblock_release(st->dblock_fd); /* after the database is closed */
    pthread_mutex_destroy(&st->lock);
    xfree(st);
}

static int sq_add(void *ctx, struct srv_store_job *j, struct err *e)
{
    struct sq_store *st = ctx;
    sqlite3_stmt *s;
    int rc = 0;
    pthread_mutex_lock(&st->lock);
    if (sqlite3_prepare_v2(st->db,
                           "INSERT INTO jobs(prompt_id, number, number_text, prompt, extra_data, "
                           "outputs_to_execute, client_id, status, created_ms) "
                           "VALUES(?,?,?,?,?,?,?,'pending',?)",
                           -1, &s, NULL) != SQLITE_OK) {
        rc = err_set(e, ERR_IO, "cannot store job: %s", sqlite3_errmsg(st->db));
        goto out;
    }
    sqlite3_bind_text(s, 1, j->prompt_id, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 2, j->number);
    sqlite3_bind_text(s, 3, j->number_text, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, j->prompt, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 5, j->extra_data, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 6, j->outputs_to_execute, -1, SQLITE_STATIC);
    if (j->client_id)
        sqlite3_bind_text(s, 7, j->client_id, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, 7);
    sqlite3_bind_int64(s, 8, clock_wall_ms());
    if (sqlite3_step(s) != SQLITE_DONE)
        rc = err_set(e, ERR_IO, "cannot store job: %s", sqlite3_errmsg(st->db));
    else
        j->id = sqlite3_last_insert_rowid(st->db);
    sqlite3_finalize(s);
out:
    pthread_mutex_unlock(&st->lock);
    return rc;
}

static int sq_load_pending(void *ctx, void (*fn)(void *user, struct srv_store_job *j),
                           void *user)
{
    struct sq_store *st = ctx;
    sqlite3_stmt *s;
    pthread_mutex_lock(&st->lock);
    if (sqlite3_prepare_v2(st->db,
                           "SELECT id, prompt_id, number, number_text, prompt, extra_data, "
                           "outputs_to_execute, client_id FROM jobs WHERE status='pending' "
                           "ORDER BY number, prompt_id, id",
                           -1, &s, NULL) != SQLITE_OK) {
        pthread_mutex_unlock(&st->lock);
        return ERR_IO;
    }
    int n = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        struct srv_store_job j = {
            .id = sqlite3_column_int64(s, 0),
            .prompt_id = col_dup(s, 1),
            .number = sqlite3_column_double(s, 2),
            .number_text = col_dup(s, 3),
            .prompt = col_dup(s, 4),
            .extra_data = col_dup(s, 5),
            .outputs_to_execute = col_dup(s, 6),
            .client_id = col_dup(s, 7),
        };
        fn(user, &j);
        srv_store_job_release(&j);
        n++;
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    return n;
}

static int64_t sq_next_counter(void *ctx)
{
    struct sq_store *st = ctx;
    sqlite3_stmt *s;
    int64_t next = 0;
    pthread_mutex_lock(&st->lock);
    /* Only counter-assigned numbers (n or -n for front) look like plain integers; client
     * numbers are Python floats and always carry '.' or 'e'. */
    if (sqlite3_prepare_v2(st->db,
                           "SELECT COALESCE(MAX(ABS(CAST(number_text AS INTEGER))), -1) + 1 FROM jobs "
                           "WHERE number_text NOT LIKE '%.%' AND number_text NOT LIKE '%e%'",
                           -1, &s, NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW)
            next = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    pthread_mutex_unlock(&st->lock);
    return next;
}

static int exec_id(struct sq_store *st, const char *sql, int64_t id)
{
    pthread_mutex_lock(&st->lock);
    int rc = exec_id_locked(st, sql, id);
    pthread_mutex_unlock(&st->lock);
    return rc;
}

static int sq_mark_running(void *ctx, int64_t id)
{
    struct sq_store *st = ctx;
    /* Counted and committed before the job runs, so a crash during it is on record. */
    return exec_id(st,
                   "UPDATE jobs SET status='running', started_ms=?2, attempts=attempts+1 "
                   "WHERE id=?1",
                   id);
}

static int sq_delete_pending(void *ctx, int64_t id)
{
    struct sq_store *st = ctx;
    return exec_id(st, "DELETE FROM jobs WHERE id=?1 AND status='pending' AND ?2 IS NOT NULL", id);
}

static int sq_finish(void *ctx, int64_t id, const char *status_str,
                     const char *outputs, const char *messages, const char *meta)
{
    struct sq_store *st = ctx;
    pthread_mutex_lock(&st->lock);
    int rc = finish_locked(st, id, status_str, outputs, messages, meta);
    pthread_mutex_unlock(&st->lock);
    return rc;
}

/* Row columns: prompt_id, number_text, prompt, extra_data, outputs_to_execute, status,
 * outputs, messages, meta. */
static void add_entry(cJSON *obj, sqlite3_stmt *s)
{
    const char *col[9];
    for (int i = 0; i < 9; i++)
        col[i] = (const char *)sqlite3_column_text(s, i);
    srv_store__history_entry(obj, col);
}

#define HISTORY_COLS                                                                       \
    "SELECT prompt_id, number_text, prompt, extra_data, outputs_to_execute, status, "     \
    "outputs, messages, meta FROM jobs WHERE history_seq IS NOT NULL "

static cJSON *sq_history(void *ctx, long max_items, long offset)
{
    struct sq_store *st = ctx;
    cJSON *obj = cJSON_CreateObject();
    pthread_mutex_lock(&st->lock);
    long count = 0;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->db, "SELECT COUNT(*) FROM jobs WHERE history_seq IS NOT NULL", -1,
                           &s, NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW)
            count = (long)sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    /* ComfyUI: max_items alone takes the newest N; offset counts from the oldest. */
    if (offset < 0)
        offset = max_items >= 0 && max_items < count ? count - max_items : 0;
    long limit = max_items >= 0 ? max_items : -1;
    if (sqlite3_prepare_v2(st->db, HISTORY_COLS "ORDER BY history_seq LIMIT ? OFFSET ?", -1, &s,
                           NULL) == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, limit);
        sqlite3_bind_int64(s, 2, offset);
        while (sqlite3_step(s) == SQLITE_ROW)
            add_entry(obj, s);
        sqlite3_finalize(s);
    }
    pthread_mutex_unlock(&st->lock);
    return obj;
}

static cJSON *sq_history_one(void *ctx, const char *prompt_id)
{
    struct sq_store *st = ctx;
    cJSON *obj = cJSON_CreateObject();
    sqlite3_stmt *s;
    pthread_mutex_lock(&st->lock);
    if (sqlite3_prepare_v2(st->db, HISTORY_COLS "AND prompt_id=? ORDER BY history_seq DESC LIMIT 1",
                           -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, prompt_id, -1, SQLITE_STATIC);
        if (sqlite3_step(s) == SQLITE_ROW)
            add_entry(obj, s);
        sqlite3_finalize(s);
    }
    pthread_mutex_unlock(&st->lock);
    return obj;
}

static int sq_history_clear(void *ctx)
{
    struct sq_store *st = ctx;
    pthread_mutex_lock(&st->lock);
    int rc = sqlite3_exec(st->db, "DELETE FROM jobs WHERE history_seq IS NOT NULL", NULL, NULL,
                          NULL) == SQLITE_OK ? 0 : ERR_IO;
    pthread_mutex_unlock(&st->lock);
    return rc;
}

static int sq_history_delete(void *ctx, const char *prompt_id)
{
    struct sq_store *st = ctx;
    sqlite3_stmt *s;
    int rc = ERR_IO;
    pthread_mutex_lock(&st->lock);
    if (sqlite3_prepare_v2(st->db, "DELETE FROM jobs WHERE history_seq IS NOT NULL AND prompt_id=?",
                           -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, prompt_id, -1, SQLITE_STATIC);
        rc = sqlite3_step(s) == SQLITE_DONE ? 0 : ERR_IO;
        sqlite3_finalize(s);
    }
    pthread_mutex_unlock(&st->lock);
    return rc;
}

static long sq_history_count(void *ctx)
{
    struct sq_store *st = ctx;
    sqlite3_stmt *s;
    long n = 0;
    pthread_mutex_lock(&st->lock);
    if (sqlite3_prepare_v2(st->db, "SELECT COUNT(*) FROM jobs WHERE history_seq IS NOT NULL", -1,
                           &s, NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW)
            n = (long)sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    pthread_mutex_unlock(&st->lock);
    return n;
}

const struct srv_store_ops srv_store__sqlite_ops = {
    .name = "sqlite",
    .close = sq_close,
    .add = sq_add,
    .load_pending = sq_load_pending,
    .next_counter = sq_next_counter,
    .mark_running = sq_mark_running,
    .finish = sq_finish,
    .delete_pending = sq_delete_pending,
    .history = sq_history,
    .history_one = sq_history_one,
    .history_clear = sq_history_clear,
    .history_delete = sq_history_delete,
    .history_count = sq_history_count,
};
