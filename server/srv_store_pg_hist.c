/*
 * The PostgreSQL store's history: finishing a row, /history reads and deletes. Same rules
 * as the SQLite store (srv_store.h): completion order, a reused prompt_id replaces the
 * older entry, SRV_STORE_HISTORY_MAX entries at most.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "alloc.h"
#include "clock.h"
#include "srv_store_pg.h"

#define HISTORY_COLS                                                                       \
    "SELECT prompt_id, number_text, prompt, extra_data, outputs_to_execute, status, "     \
    "outputs, messages, meta FROM latentd_jobs WHERE history_seq IS NOT NULL "

int pg__finish_row(PGconn *c, int64_t id, const char *status_str, const char *outputs,
                   const char *messages, const char *meta)
{
    char ids[32], now[32], cap[32];
    snprintf(ids, sizeof(ids), "%" PRId64, id);
    snprintf(now, sizeof(now), "%" PRId64, clock_wall_ms());
    snprintf(cap, sizeof(cap), "%d", SRV_STORE_HISTORY_MAX);
    const char *v1[1] = {ids};
    PGresult *r = pg__exec(c, "SELECT extra_data FROM latentd_jobs WHERE id=$1", 1, v1);
    char *extra = r && PQntuples(r) ? srv_store__strip_secrets(PQgetvalue(r, 0, 0)) : NULL;
    PQclear(r);
    const char *v[7] = {ids, status_str, outputs ? outputs : "{}", messages ? messages : "[]",
                        meta ? meta : "{}", now, extra};
    int rc = pg__cmd(c,
                     "UPDATE latentd_jobs SET status=$2, outputs=$3, messages=$4, meta=$5, "
                     "completed_ms=$6, history_seq=nextval('latentd_history_seq'), "
                     "extra_data=COALESCE($7, extra_data), worker=NULL, lease_until=NULL "
                     "WHERE id=$1",
                     7, v);
    xfree(extra);
    if (rc < 0)
        return rc;
    pg__cmd(c,
            "DELETE FROM latentd_jobs WHERE id<>$1 AND history_seq IS NOT NULL AND "
            "prompt_id=(SELECT prompt_id FROM latentd_jobs WHERE id=$1)",
            1, v1);
    const char *v2[1] = {cap};
    pg__cmd(c,
            "DELETE FROM latentd_jobs WHERE history_seq IS NOT NULL AND history_seq <= "
            "(SELECT MAX(history_seq) FROM latentd_jobs) - $1::bigint",
            1, v2);
    return 0;
}

static void add_rows(cJSON *obj, PGresult *r)
{
    for (int i = 0; r && i < PQntuples(r); i++) {
        const char *col[9];
        for (int k = 0; k < 9; k++)
            col[k] = PQgetisnull(r, i, k) ? NULL : PQgetvalue(r, i, k);
        srv_store__history_entry(obj, col);
    }
}

long pg__history_count(void *ctx)
{
    struct pg_store *st = ctx;
    PGconn *c = pg__take(st);
    PGresult *r = pg__exec(c, "SELECT count(*) FROM latentd_jobs WHERE history_seq IS NOT NULL",
                           0, NULL);
    long n = r && PQntuples(r) ? atol(PQgetvalue(r, 0, 0)) : 0;
    PQclear(r);
    pg__give(st, c);
    return n;
}

cJSON *pg__history(void *ctx, long max_items, long offset)
{
    struct pg_store *st = ctx;
    long count = pg__history_count(ctx);
    /* ComfyUI: max_items alone takes the newest N; offset counts from the oldest. */
    if (offset < 0)
        offset = max_items >= 0 && max_items < count ? count - max_items : 0;
    char lim[32], off[32];
    snprintf(off, sizeof(off), "%ld", offset);
    snprintf(lim, sizeof(lim), "%ld", max_items);
    const char *v[2] = {max_items >= 0 ? lim : NULL, off};
    cJSON *obj = cJSON_CreateObject();
    PGconn *c = pg__take(st);
    PGresult *r = pg__exec(c, HISTORY_COLS "ORDER BY history_seq LIMIT $1::bigint OFFSET "
                                           "$2::bigint", 2, v);
    pg__give(st, c);
    add_rows(obj, r);
    PQclear(r);
    return obj;
}

cJSON *pg__history_one(void *ctx, const char *prompt_id)
{
    struct pg_store *st = ctx;
    const char *v[1] = {prompt_id};
    cJSON *obj = cJSON_CreateObject();
    PGconn *c = pg__take(st);
    PGresult *r = pg__exec(c, HISTORY_COLS "AND prompt_id=$1 ORDER BY history_seq DESC LIMIT 1",
                           1, v);
    pg__give(st, c);
    add_rows(obj, r);
    PQclear(r);
    return obj;
}

int pg__history_clear(void *ctx)
{
    struct pg_store *st = ctx;
    PGconn *c = pg__take(st);
    int rc = pg__cmd(c, "DELETE FROM latentd_jobs WHERE history_seq IS NOT NULL", 0, NULL);
    pg__give(st, c);
    return rc;
}

int pg__history_delete(void *ctx, const char *prompt_id)
{
    struct pg_store *st = ctx;
    const char *v[1] = {prompt_id};
    PGconn *c = pg__take(st);
    int rc = pg__cmd(c, "DELETE FROM latentd_jobs WHERE history_seq IS NOT NULL AND "
                        "prompt_id=$1", 1, v);
    pg__give(st, c);
    return rc;
}
