/* Unit tests for server/srv_store (SQLite job store) and server/srv_queue: pending rows
 * survive reopening, a row left running is queued again once and then becomes a failed
 * history entry, a database without the attempts column is migrated, history ordering
 * and max_items/offset, prompt_id reuse, queue ordering and removal. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "harness.h"
#include "srv_queue.h"
#include "srv_store.h"

static int64_t add(struct srv_store *st, const char *id, double number, const char *ntext)
{
    struct srv_store_job j = {
        .prompt_id = (char *)id,
        .number = number,
        .number_text = (char *)ntext,
        .prompt = "{\"1\":{\"class_type\":\"X\",\"inputs\":{\"seed\":18446744073709551615}}}",
        .extra_data = "{\"client_id\":\"c1\",\"api_key_comfy_org\":\"secret\"}",
        .outputs_to_execute = "[\"1\"]",
        .client_id = "c1",
    };
    struct err e = {0};
    int rc = srv_store_add(st, &j, &e);
    ok(rc == 0, "add '%s' (%s)", id, e.msg);
    return j.id;
}

static int n_pending;
static char order[256];
static void count_pending(void *user, struct srv_store_job *j)
{
    (void)user;
    n_pending++;
    strcat(order, j->prompt_id);
    strcat(order, ",");
}

static void test_store(const char *path)
{
    struct err e = {0};
    struct srv_store *st = srv_store_open(path, &e);
    ok(st != NULL, "open store (%s)", e.msg);
    int64_t a = add(st, "b", 1, "1");
    int64_t b = add(st, "a", 1, "1");
    int64_t c = add(st, "c", 0, "0");
    add(st, "d", 7.5, "7.5");
    EXPECT_EQ(srv_store_next_counter(st), 2);
    srv_store_mark_running(st, c);
    srv_store_close(st);

    /* Reopen as after kill -9: "c" was running once, so it is queued again in its place. */
    st = srv_store_open(path, &e);
    ok(st != NULL, "reopen store");
    n_pending = 0;
    order[0] = 0;
    srv_store_load_pending(st, count_pending, NULL);
    EXPECT_EQ(n_pending, 4);
    EXPECT_STR(order, "c,a,b,d,");
    EXPECT_EQ(srv_store_history_count(st), 0);
    srv_store_mark_running(st, c);
    srv_store_close(st);

    /* Killed again while running "c": its second start, so it is not run a third time. */
    st = srv_store_open(path, &e);
    ok(st != NULL, "reopen store again");
    n_pending = 0;
    order[0] = 0;
    srv_store_load_pending(st, count_pending, NULL);
    EXPECT_EQ(n_pending, 3);
    EXPECT_STR(order, "a,b,d,");
    cJSON *h = srv_store_history_one(st, "c");
    cJSON *entry = cJSON_GetObjectItem(h, "c");
    ok(entry != NULL, "crashed job is in history");
    cJSON *status = cJSON_GetObjectItem(entry, "status");
    EXPECT_STR(cJSON_GetObjectItem(status, "status_str")->valuestring, "error");
    ok(cJSON_IsFalse(cJSON_GetObjectItem(status, "completed")), "completed is false");
    char *msgs = cJSON_PrintUnformatted(cJSON_GetObjectItem(status, "messages"));
    ok(strstr(msgs, "stopped while this prompt was running, each of the 2 times") != NULL,
       "message says why: %s", msgs);
    cJSON_free(msgs);
    cJSON *prompt = cJSON_GetObjectItem(entry, "prompt");
    EXPECT_EQ(cJSON_GetArraySize(prompt), 5);
    char *ptext = cJSON_PrintUnformatted(prompt);
    ok(strstr(ptext, "18446744073709551615") != NULL, "64-bit seed kept exact: %s", ptext);
    ok(strstr(ptext, "secret") == NULL, "secrets stripped from history");
    cJSON_free(ptext);
    cJSON_Delete(h);

    srv_store_mark_running(st, b);
    srv_store_finish(st, b, "success", "{\"1\":{\"images\":[]}}", "[]", "{}");
    srv_store_mark_running(st, a);
    srv_store_finish(st, a, "interrupted", "{}", "[]", "{}");
    EXPECT_EQ(srv_store_history_count(st), 3);
    /* order: c, a(id "a"), b(id "b") by completion */
    h = srv_store_history(st, -1, -1);
    EXPECT_STR(h->child->string, "c");
    EXPECT_STR(h->child->next->string, "a");
    EXPECT_STR(h->child->next->next->string, "b");
    cJSON_Delete(h);
    h = srv_store_history(st, 2, -1); /* newest two */
    EXPECT_EQ(cJSON_GetArraySize(h), 2);
    EXPECT_STR(h->child->string, "a");
    cJSON_Delete(h);
    h = srv_store_history(st, 2, 0); /* oldest two */
    EXPECT_STR(h->child->string, "c");
    EXPECT_EQ(cJSON_GetArraySize(h), 2);
    cJSON_Delete(h);
    h = srv_store_history(st, -1, 5);
    EXPECT_EQ(cJSON_GetArraySize(h), 0);
    cJSON_Delete(h);
    /* Reusing a prompt id overwrites its history entry once the new job finishes. */
    int64_t a2 = add(st, "a", 3, "3");
    srv_store_mark_running(st, a2);
    srv_store_finish(st, a2, "success", "{}", "[]", "{}");
    EXPECT_EQ(srv_store_history_count(st), 3);
    h = srv_store_history_one(st, "a");
    EXPECT_STR(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(h, "a"), "status"),
                                   "status_str")->valuestring, "success");
    cJSON_Delete(h);
    srv_store_history_delete(st, "c");
    EXPECT_EQ(srv_store_history_count(st), 2);
    srv_store_history_clear(st);
    EXPECT_EQ(srv_store_history_count(st), 0);
    h = srv_store_history_one(st, "nope");
    EXPECT_EQ(cJSON_GetArraySize(h), 0);
    cJSON_Delete(h);
    srv_store_close(st);
}

/* A database from before the attempts column, with a job left running: it opens, gains
 * the column and the job is queued again (its first recorded start). */
static void test_migrate(const char *path)
{
    sqlite3 *db;
    ok(sqlite3_open(path, &db) == SQLITE_OK, "create an old database");
    const char *old =
        "CREATE TABLE jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, prompt_id TEXT NOT NULL,"
        " number REAL NOT NULL, number_text TEXT NOT NULL, prompt TEXT NOT NULL,"
        " extra_data TEXT NOT NULL, outputs_to_execute TEXT NOT NULL, client_id TEXT,"
        " status TEXT NOT NULL, outputs TEXT, messages TEXT, meta TEXT, created_ms INTEGER,"
        " started_ms INTEGER, completed_ms INTEGER, history_seq INTEGER);"
        "INSERT INTO jobs(prompt_id, number, number_text, prompt, extra_data,"
        " outputs_to_execute, status) VALUES('old', 0, '0', '{}', '{}', '[]', 'running');";
    ok(sqlite3_exec(db, old, NULL, NULL, NULL) == SQLITE_OK, "old schema and row");
    sqlite3_close(db);
    struct err e = {0};
    struct srv_store *st = srv_store_open(path, &e);
    ok(st != NULL, "old database opens (%s)", e.msg);
    n_pending = 0;
    order[0] = 0;
    srv_store_load_pending(st, count_pending, NULL);
    EXPECT_STR(order, "old,");
    ok(srv_store_mark_running(st, 1) == 0, "attempts column usable");
    srv_store_close(st);
    st = srv_store_open(path, &e);
    EXPECT_EQ(srv_store_history_count(st), 0); /* one recorded start: queued again */
    srv_store_close(st);
}

static struct srv_job *job(const char *id, double number, const char *ntext)
{
    struct srv_job *j = xcalloc(1, sizeof(*j));
    j->prompt_id = xstrdup(id);
    j->number = number;
    j->number_text = xstrdup(ntext);
    j->prompt = cJSON_CreateObject();
    j->extra_data = cJSON_CreateObject();
    j->outputs = cJSON_CreateArray();
    return j;
}

static void test_queue(void)
{
    struct srv_queue q;
    srv_queue_init(&q, 5);
    EXPECT_EQ(srv_queue_take_number(&q, 0), 5);
    EXPECT_EQ(srv_queue_take_number(&q, 1), -6);
    srv_queue_push(&q, job("z", 1, "1"), NULL, NULL);
    srv_queue_push(&q, job("y", 1, "1"), NULL, NULL);
    srv_queue_push(&q, job("x", -6, "-6"), NULL, NULL);
    srv_queue_push(&q, job("w", 2.5, "2.5"), NULL, NULL);
    EXPECT_EQ(srv_queue_remaining(&q), 4);
    cJSON *js = srv_queue_json(&q);
    char *t = cJSON_PrintUnformatted(js);
    ok(strstr(t, "\"queue_pending\":[[-6,\"x\",{},{},[]],[1,\"y\"") != NULL, "pending sorted: %s", t);
    ok(strstr(t, "[2.5,\"w\"") != NULL, "float number kept");
    cJSON_free(t);
    cJSON_Delete(js);
    struct srv_job *r = srv_queue_wait_pop(&q);
    EXPECT_STR(r->prompt_id, "x");
    EXPECT_EQ(srv_queue_remaining(&q), 4);
    char *rid = srv_queue_running_id(&q);
    EXPECT_STR(rid, "x");
    xfree(rid);
    cJSON *ids = cJSON_CreateArray();
    cJSON_AddItemToArray(ids, cJSON_CreateString("z"));
    cJSON_AddItemToArray(ids, cJSON_CreateString("x")); /* running: untouched */
    cJSON_AddItemToArray(ids, cJSON_CreateString("unknown"));
    int64_t *rows = NULL;
    EXPECT_EQ(srv_queue_remove(&q, 0, ids, &rows), 1);
    xfree(rows);
    cJSON_Delete(ids);
    EXPECT_EQ(srv_queue_remaining(&q), 3);
    srv_job_free(srv_queue_finish_running(&q));
    EXPECT_EQ(srv_queue_remove(&q, 1, NULL, &rows), 2);
    xfree(rows);
    EXPECT_EQ(srv_queue_remaining(&q), 0);
    srv_queue_stop(&q);
    ok(srv_queue_wait_pop(&q) == NULL, "stopped queue pops nothing");
    srv_queue_release(&q);
}

int main(void)
{
    char dir[] = "/tmp/latentd-store-XXXXXX";
    if (!mkdtemp(dir))
        SKIP("no temp dir");
    char path[256];
    snprintf(path, sizeof(path), "%s/jobs.db", dir);
    test_store(path);
    snprintf(path, sizeof(path), "%s/old.db", dir);
    test_migrate(path);
    test_queue();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("# cleanup failed\n");
    EXPECT_EQ(alloc_live_count(), 0);
    return harness_done();
}
