/*
 * pool.c — the one persistent CPU worker pool behind every CPU op.
 *
 * Workers sleep on a condition variable between jobs (never spin): on a shared
 * machine a spinning worker steals the core another process (or a straggling
 * sibling) needs. A job is a range [0, n); threads take pieces of `grain`
 * items from a shared atomic cursor until it runs out, so when one thread is
 * descheduled the others do its share instead of waiting for it (static
 * halves made an op as slow as its slowest thread on a loaded machine). The
 * calling thread takes part, so a 1-thread pool costs nothing. Nested calls (a
 * task calling tensor__pool_for) run inline, and so does a job submitted
 * while another thread's job is running (ops are meant for one thread at a
 * time, but a second caller must degrade to single-threaded, not corrupt the
 * pool).
 *
 * Threads: tensor__pool_for is called by one thread at a time (the executor);
 * the pool's lock is a leaf.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "alloc.h"
#include "../tensor_impl.h"

#define POOL_MAX 64

static struct pool {
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    pthread_t tid[POOL_MAX];
    int nthreads;            /* including the caller */
    int started;             /* workers running */
    int want;                /* requested size, 0 = default */
    uint64_t gen;            /* job generation; a worker joins each at most once */
    int open;                /* the current job still accepts workers */
    int active;              /* workers that joined the current job and are not done */
    int stop;
    tensor_pool_fn fn;
    void *ctx;
    int64_t n;
    int64_t grain;
    atomic_llong next;       /* cursor into [0, n) */
} P = {.mu = PTHREAD_MUTEX_INITIALIZER,
         .wake = PTHREAD_COND_INITIALIZER,
         .done = PTHREAD_COND_INITIALIZER};

static _Thread_local int in_task;
static pthread_mutex_t job_mu = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */

/* Take pieces from the cursor until the range is exhausted. */
static void drain(tensor_pool_fn fn, void *ctx, int64_t n, int64_t grain, int tid)
{
    for (;;) {
        int64_t b = atomic_fetch_add(&P.next, grain);
        if (b >= n)
            return;
        fn(ctx, b, b + grain < n ? b + grain : n, tid);
    }
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    uint64_t seen = 0;
    in_task = 1;
    pthread_mutex_lock(&P.mu);
    for (;;) {
        /* Sleep until a job we have not seen is open. A job that closed before we
         * got the CPU is skipped: its caller did the work and did not wait for us. */
        while (!P.stop) {
            if (P.gen != seen) {
                seen = P.gen;
                if (P.open)
                    break;
                continue;
            }
            pthread_cond_wait(&P.wake, &P.mu);
        }
        if (P.stop)
            break;
        tensor_pool_fn fn = P.fn;
        void *ctx = P.ctx;
        int64_t n = P.n, grain = P.grain;
        P.active++;
        pthread_mutex_unlock(&P.mu);
        drain(fn, ctx, n, grain, id);
        pthread_mutex_lock(&P.mu);
        if (--P.active == 0)
            pthread_cond_signal(&P.done);
    }
    pthread_mutex_unlock(&P.mu);
    return NULL;
}

static int default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > POOL_MAX ? POOL_MAX : (int)n;
}

static void pool_start(void)
{
    int n = P.want > 0 ? P.want : default_threads();
    if (n > POOL_MAX)
        n = POOL_MAX;
    P.nthreads = n;
    P.stop = 0;
    for (int i = 1; i < n; i++)
        if (pthread_create(&P.tid[i], NULL, worker, (void *)(intptr_t)i) != 0)
            PANIC("cannot start tensor pool thread %d", i);
    P.started = 1;
}

void tensor__pool_shutdown(void)
{
    pthread_mutex_lock(&job_mu);
    if (!P.started) {
        pthread_mutex_unlock(&job_mu);
        return;
    }
    pthread_mutex_lock(&P.mu);
    P.stop = 1;
    pthread_cond_broadcast(&P.wake);
    pthread_mutex_unlock(&P.mu);
    for (int i = 1; i < P.nthreads; i++)
        pthread_join(P.tid[i], NULL);
    P.started = 0;
    P.nthreads = 0;
    pthread_mutex_unlock(&job_mu);
}

void tensor_threads_set(int n)
{
    tensor__pool_shutdown();
    P.want = n < 1 ? 0 : n;
}

int tensor_threads_get(void)
{
    return P.started ? P.nthreads : (P.want > 0 ? P.want : default_threads());
}

int tensor__pool_threads(void)
{
    return tensor_threads_get();
}

void **tensor__pool_scratch_new(size_t bytes)
{
    int nt = tensor__pool_threads();
    void **b = xmalloc((size_t)(nt + 1) * sizeof(void *));
    for (int i = 0; i < nt; i++)
        b[i] = xmalloc_aligned(64, bytes);
    b[nt] = NULL;
    return b;
}

void tensor__pool_scratch_free(void **blocks)
{
    if (!blocks)
        return;
    for (int i = 0; blocks[i]; i++)
        xfree_aligned(blocks[i]);
    xfree(blocks);
}

void tensor__pool_for(int64_t n, tensor_pool_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (in_task) {
        fn(ctx, 0, n, 0);
        return;
    }
    if (pthread_mutex_trylock(&job_mu) != 0) {
        fn(ctx, 0, n, 0);
        return;
    }
    if (!P.started)
        pool_start();
    if (P.nthreads == 1 || n == 1) {
        fn(ctx, 0, n, 0);
        pthread_mutex_unlock(&job_mu);
        return;
    }
    /* ~4 pieces per thread: enough to rebalance, few enough to keep pieces large */
    int64_t grain = n / ((int64_t)P.nthreads * 4);
    grain = grain < 1 ? 1 : grain;
    pthread_mutex_lock(&P.mu);
    P.fn = fn;
    P.ctx = ctx;
    P.n = n;
    P.grain = grain;
    atomic_store(&P.next, 0);
    P.open = 1;
    P.gen++;
    pthread_cond_broadcast(&P.wake);
    pthread_mutex_unlock(&P.mu);

    in_task = 1;
    drain(fn, ctx, n, grain, 0);
    in_task = 0;

    /* Every piece has been taken. Wait only for the workers that joined (they may
     * still be running a piece); one that has not been scheduled yet will find the
     * job closed. On a loaded machine this is what keeps an op from waiting a whole
     * host time slice for a worker that has nothing left to do. */
    pthread_mutex_lock(&P.mu);
    P.open = 0;
    while (P.active > 0)
        pthread_cond_wait(&P.done, &P.mu);
    pthread_mutex_unlock(&P.mu);
    pthread_mutex_unlock(&job_mu);
}
