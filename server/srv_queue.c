#include "srv_queue.h"

#include <string.h>
#include <time.h>

#include "alloc.h"

void srv_job_free(struct srv_job *j)
{
    if (!j)
        return;
    xfree(j->prompt_id);
    xfree(j->number_text);
    graph_prompt_free(j->native); /* before the JSON it borrows */
    cJSON_Delete(j->prompt);
    cJSON_Delete(j->extra_data);
    cJSON_Delete(j->outputs);
    xfree(j->client_id);
    xfree(j);
}

void srv_queue_init(struct srv_queue *q, int64_t counter)
{
    memset(q, 0, sizeof(*q));
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->cond, NULL);
    q->counter = counter;
}

void srv_queue_release(struct srv_queue *q)
{
    for (int i = 0; i < q->n_pending; i++)
        srv_job_free(q->pending[i]);
    xfree(q->pending);
    srv_job_free(q->running);
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->lock);
}

int64_t srv_queue_take_number(struct srv_queue *q, int front)
{
    pthread_mutex_lock(&q->lock);
    int64_t n = q->counter++;
    pthread_mutex_unlock(&q->lock);
    return front ? -n : n;
}

/* ComfyUI's heap orders by (number, prompt_id). */
static int job_cmp(const struct srv_job *a, const struct srv_job *b)
{
    if (a->number != b->number)
        return a->number < b->number ? -1 : 1;
    return strcmp(a->prompt_id, b->prompt_id);
}

int srv_queue_push(struct srv_queue *q, struct srv_job *j, void (*notify)(void *user, int remaining),
                   void *user)
{
    pthread_mutex_lock(&q->lock);
    if (q->n_pending == q->cap_pending) {
        q->cap_pending = q->cap_pending ? q->cap_pending * 2 : 16;
        q->pending = xrealloc(q->pending, (size_t)q->cap_pending * sizeof(*q->pending));
    }
    int i = q->n_pending;
    /* Stable for equal keys: a later push goes after the earlier one. */
    while (i > 0 && job_cmp(q->pending[i - 1], j) > 0) {
        q->pending[i] = q->pending[i - 1];
        i--;
    }
    q->pending[i] = j;
    q->n_pending++;
    int remaining = q->n_pending + (q->running != NULL);
    if (notify)
        notify(user, remaining);
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
    return remaining;
}

struct srv_job *srv_queue_wait_pop(struct srv_queue *q)
{
    pthread_mutex_lock(&q->lock);
    while (!q->stopping && !q->wake && q->n_pending == 0)
        pthread_cond_wait(&q->cond, &q->lock);
    struct srv_job *j = NULL;
    if (q->wake) {
        q->wake = 0;
    } else if (!q->stopping && q->n_pending > 0) {
        j = q->pending[0];
        memmove(q->pending, q->pending + 1, (size_t)(q->n_pending - 1) * sizeof(*q->pending));
        q->n_pending--;
        q->running = j;
    }
    pthread_mutex_unlock(&q->lock);
    return j;
}

struct srv_job *srv_queue_finish_running(struct srv_queue *q)
{
    pthread_mutex_lock(&q->lock);
    struct srv_job *j = q->running;
    q->running = NULL;
    pthread_mutex_unlock(&q->lock);
    return j;
}

void srv_queue_wake(struct srv_queue *q)
{
    pthread_mutex_lock(&q->lock);
    q->wake = 1;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

int srv_queue_wait_wake(struct srv_queue *q, int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&q->lock);
    while (!q->stopping && !q->wake)
        if (pthread_cond_timedwait(&q->cond, &q->lock, &ts) != 0)
            break;
    int rc = q->stopping ? -1 : q->wake ? 1 : 0;
    q->wake = 0;
    pthread_mutex_unlock(&q->lock);
    return rc;
}

void srv_queue_set_running(struct srv_queue *q, struct srv_job *j)
{
    pthread_mutex_lock(&q->lock);
    q->running = j;
    pthread_mutex_unlock(&q->lock);
}

int64_t srv_queue_running_row(struct srv_queue *q)
{
    pthread_mutex_lock(&q->lock);
    int64_t id = q->running ? q->running->row_id : 0;
    pthread_mutex_unlock(&q->lock);
    return id;
}

void srv_queue_stop(struct srv_queue *q)
{
    pthread_mutex_lock(&q->lock);
    q->stopping = 1;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

int srv_queue_remaining(struct srv_queue *q)
{
    pthread_mutex_lock(&q->lock);
    int n = q->n_pending + (q->running != NULL);
    pthread_mutex_unlock(&q->lock);
    return n;
}

char *srv_queue_running_id(struct srv_queue *q)
{
    pthread_mutex_lock(&q->lock);
    char *id = q->running ? xstrdup(q->running->prompt_id) : NULL;
    pthread_mutex_unlock(&q->lock);
    return id;
}

static int id_listed(const cJSON *ids, const char *id)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, ids)
    {
        if (cJSON_IsString(it) && strcmp(it->valuestring, id) == 0)
            return 1;
    }
    return 0;
}

int srv_queue_remove(struct srv_queue *q, int clear, const cJSON *ids, int64_t **rows)
{
    pthread_mutex_lock(&q->lock);
    int64_t *r = xmalloc(((size_t)q->n_pending + 1) * sizeof(*r));
    int removed = 0, kept = 0;
    for (int i = 0; i < q->n_pending; i++) {
        struct srv_job *j = q->pending[i];
        if (clear || (ids && id_listed(ids, j->prompt_id))) {
            r[removed++] = j->row_id;
            srv_job_free(j);
        } else {
            q->pending[kept++] = j;
        }
    }
    q->n_pending = kept;
    pthread_mutex_unlock(&q->lock);
    *rows = r;
    return removed;
}

cJSON *srv_job_item_json(const struct srv_job *j)
{
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateRaw(j->number_text));
    cJSON_AddItemToArray(a, cJSON_CreateString(j->prompt_id));
    cJSON_AddItemToArray(a, cJSON_Duplicate(j->prompt, 1));
    cJSON_AddItemToArray(a, cJSON_Duplicate(j->extra_data, 1));
    cJSON_AddItemToArray(a, cJSON_Duplicate(j->outputs, 1));
    return a;
}

cJSON *srv_queue_json(struct srv_queue *q)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *running = cJSON_AddArrayToObject(o, "queue_running");
    cJSON *pending = cJSON_AddArrayToObject(o, "queue_pending");
    pthread_mutex_lock(&q->lock);
    if (q->running)
        cJSON_AddItemToArray(running, srv_job_item_json(q->running));
    for (int i = 0; i < q->n_pending; i++)
        cJSON_AddItemToArray(pending, srv_job_item_json(q->pending[i]));
    pthread_mutex_unlock(&q->lock);
    return o;
}
