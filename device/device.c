/*
 * device.c — the device registry (spec parsing, backend selection) and the parts
 * every backend shares: exact byte accounting against the budget, peak tracking,
 * argument checks, and the list of user streams freed at close.
 *
 * The budget check lives here, not in the backends, so that "never overcommit"
 * holds the same way for cpu, sim and cuda: used + bytes > budget is refused
 * before any backend memory is touched.
 */
#include "dev_backend.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "bytesize.h"
#include "log.h"

int dev_cuda_count(void)
{
#ifdef HAVE_CUDA
    return dev__cuda_count();
#else
    return 0;
#endif
}

static int open_cuda(struct dev *d, const char *spec, int ordinal, struct err *e)
{
#ifdef HAVE_CUDA
    int n = dev__cuda_count();
    if (n <= 0)
        return err_set(e, ERR_NOT_FOUND, "cannot open device '%s': no usable CUDA GPU", spec);
    if (ordinal < 0 || ordinal >= n)
        return err_set(e, ERR_NOT_FOUND, "cannot open device '%s': only %d CUDA GPU(s)", spec,
                       n);
    return dev__cuda_open(d, ordinal, e);
#else
    (void)d;
    (void)ordinal;
    return err_set(e, ERR_UNSUPPORTED, "cannot open device '%s': built without CUDA", spec);
#endif
}

int dev_open(const char *spec, size_t budget, struct dev **out, struct err *e)
{
    *out = NULL;
    if (!spec)
        spec = "auto";
    struct dev *d = xcalloc(1, sizeof(*d));
    d->budget = budget ? budget : SIZE_MAX;
    atomic_init(&d->used, 0);
    atomic_init(&d->peak, 0);
    atomic_init(&d->n_allocs, 0);
    int rc;
    if (strcmp(spec, "cpu") == 0) {
        rc = dev__cpu_open(d, e);
    } else if (strncmp(spec, "sim:", 4) == 0) {
        size_t sz;
        if (bytesize_parse(spec + 4, &sz) < 0 || sz == 0)
            rc = err_set(e, ERR_INVALID,
                         "cannot open device '%s': bad size (want e.g. sim:512M, sim:2G)", spec);
        else
            rc = dev__sim_open(d, sz, e);
    } else if (strcmp(spec, "sim") == 0) {
        rc = err_set(e, ERR_INVALID, "cannot open device 'sim': give a size, e.g. 'sim:4G'");
    } else if (strcmp(spec, "cuda") == 0) {
        rc = open_cuda(d, spec, 0, e);
    } else if (strncmp(spec, "cuda:", 5) == 0) {
        char *end;
        long n = strtol(spec + 5, &end, 10);
        if (end == spec + 5 || *end || n < 0 || n > 64)
            rc = err_set(e, ERR_INVALID, "cannot open device '%s': bad GPU index", spec);
        else
            rc = open_cuda(d, spec, (int)n, e);
    } else if (strcmp(spec, "auto") == 0) {
        if (dev_cuda_count() > 0 && open_cuda(d, "cuda:0", 0, NULL) == 0) {
            rc = 0;
        } else {
            memset(d, 0, sizeof(*d));
            d->budget = budget ? budget : SIZE_MAX;
            rc = dev__cpu_open(d, e);
        }
    } else {
        rc = err_set(e, ERR_INVALID,
                     "unknown device '%s' (want cpu, auto, cuda, cuda:N or sim:SIZE)", spec);
    }
    if (rc < 0) {
        xfree(d);
        return rc;
    }
    d->compute.dev = d;
    d->compute.is_compute = 1;
    if ((rc = d->ops->stream_init(&d->compute)) < 0) {
        d->ops->close(d);
        xfree(d);
        return err_set(e, rc, "cannot open device '%s': compute stream", spec);
    }
    if (d->budget != SIZE_MAX)
        log_debug("device %s: budget %zu bytes", d->name, d->budget);
    *out = d;
    return 0;
}

void dev_close(struct dev *d)
{
    if (!d)
        return;
    while (d->streams)
        dev_stream_free(d->streams);
    d->ops->stream_release(&d->compute);
    long live = atomic_load(&d->n_allocs);
    if (live)
        log_warn("device %s closed with %ld allocation(s) live (%zu bytes)", d->name, live,
                 atomic_load(&d->used));
    d->ops->close(d);
    xfree(d);
}

enum dev_kind dev_kind(const struct dev *d) { return d->kind; }
const char *dev_name(const struct dev *d) { return d->name; }
int dev_is_host(const struct dev *d) { return d->kind != DEV_KIND_CUDA; }

/* ---- memory ---------------------------------------------------------------------- */

void dev_inject_oom(struct dev *d, int skip, int count)
{
    d->inject_skip = skip > 0 ? skip : 0;
    d->inject_count = count > 0 ? count : 0;
}

void dev_inject_copy_delay(struct dev *d, unsigned delay_us)
{
    if (d->kind != DEV_KIND_CUDA)
        dev__hostq_set_copy_delay(d->impl, delay_us);
}

int dev_alloc(struct dev *d, size_t bytes, void **out)
{
    *out = NULL;
    if (d->inject_count > 0) {
        if (d->inject_skip > 0) {
            d->inject_skip--;
        } else {
            d->inject_count--;
            return ERR_DEVICE_OOM;
        }
    }
    /*
     * Reserve first, then allocate: the executor is the only allocator, but
     * readers on other threads must never see used above budget, and a failed
     * backend allocation gives the reservation back.
     */
    size_t cur = atomic_load(&d->used);
    do {
        if (bytes > d->budget || cur > d->budget - bytes)
            return ERR_DEVICE_OOM;
    } while (!atomic_compare_exchange_weak(&d->used, &cur, cur + bytes));
    int rc = d->ops->alloc(d, bytes, out);
    if (rc < 0) {
        atomic_fetch_sub(&d->used, bytes);
        *out = NULL;
        return rc;
    }
    size_t now = cur + bytes, pk = atomic_load(&d->peak);
    while (now > pk && !atomic_compare_exchange_weak(&d->peak, &pk, now))
        ;
    atomic_fetch_add(&d->n_allocs, 1);
    return 0;
}

void dev_free(struct dev *d, void *ptr)
{
    if (!ptr)
        return;
    size_t n = d->ops->free(d, ptr);
    ASSERT(atomic_load(&d->used) >= n);
    atomic_fetch_sub(&d->used, n);
    atomic_fetch_sub(&d->n_allocs, 1);
}

size_t dev_bytes_used(const struct dev *d) { return atomic_load(&d->used); }
size_t dev_bytes_peak(const struct dev *d) { return atomic_load(&d->peak); }
size_t dev_bytes_budget(const struct dev *d) { return d->budget; }
long dev_alloc_count(const struct dev *d) { return atomic_load(&d->n_allocs); }

size_t dev_bytes_cached(const struct dev *d)
{
    return d->cache ? dev__blkcache_bytes(d->cache) : 0;
}

void dev_trim(struct dev *d)
{
    if (d && d->cache)
        dev__blkcache_trim(d->cache);
}

void dev_set_cache_limit(struct dev *d, size_t bytes)
{
    if (d->cache)
        dev__blkcache_set_limit(d->cache, bytes);
}

void dev_fit_cache(struct dev *d, size_t bytes)
{
    if (d && d->cache)
        dev__blkcache_fit(d->cache, bytes);
}

void dev_settle_cache(struct dev *d)
{
    if (!d || !d->cache)
        return;
    dev_peak_reset(d);
    dev__blkcache_settle(d->cache);
}

void dev_peak_reset(struct dev *d)
{
    atomic_store(&d->peak, atomic_load(&d->used));
}

int dev_mem_info(struct dev *d, size_t *free_bytes, size_t *total_bytes)
{
    size_t f = 0, t = 0;
    int rc = d->ops->mem_info(d, &f, &t);
    if (rc < 0)
        return rc;
    /* The budget is a hard cap below what the device has (--vram-budget). */
    if (d->budget < t) {
        size_t used = atomic_load(&d->used);
        size_t bf = d->budget > used ? d->budget - used : 0;
        t = d->budget;
        if (bf < f)
            f = bf;
    }
    if (free_bytes)
        *free_bytes = f;
    if (total_bytes)
        *total_bytes = t;
    return 0;
}

/* ---- copies ---------------------------------------------------------------------- */

int dev_copy(struct dev *d, enum dev_copy_kind kind, void *dst, const void *src, size_t n)
{
    if (n == 0)
        return 0;
    if (!dst || !src)
        return ERR_INVALID;
    return d->ops->copy(d, kind, dst, src, n);
}

int dev_copy_async(struct dev *d, struct dev_stream *s, enum dev_copy_kind kind, void *dst,
                   const void *src, size_t n)
{
    if (!s || s->dev != d)
        return ERR_INVALID;
    if (n == 0)
        return 0;
    if (!dst || !src)
        return ERR_INVALID;
    return d->ops->copy_async(s, kind, dst, src, n);
}

/* ---- streams and events -------------------------------------------------------------- */

struct dev_stream *dev_compute_stream(struct dev *d) { return &d->compute; }

int dev_stream_new(struct dev *d, struct dev_stream **out)
{
    struct dev_stream *s = xcalloc(1, sizeof(*s));
    s->dev = d;
    int rc = d->ops->stream_init(s);
    if (rc < 0) {
        xfree(s);
        *out = NULL;
        return rc;
    }
    s->next = d->streams;
    d->streams = s;
    *out = s;
    return 0;
}

void dev_stream_free(struct dev_stream *s)
{
    if (!s || s->is_compute)
        return;
    struct dev *d = s->dev;
    for (struct dev_stream **pp = &d->streams; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    d->ops->stream_release(s);
    xfree(s);
}

int dev_stream_sync(struct dev_stream *s) { return s->dev->ops->stream_sync(s); }

void *dev_stream_native(struct dev_stream *s)
{
    return s->dev->ops->stream_native ? s->dev->ops->stream_native(s) : NULL;
}

int dev_event_new(struct dev *d, struct dev_event **out)
{
    struct dev_event *ev = xcalloc(1, sizeof(*ev));
    ev->dev = d;
    int rc = d->ops->event_init(ev);
    if (rc < 0) {
        xfree(ev);
        *out = NULL;
        return rc;
    }
    *out = ev;
    return 0;
}

void dev_event_free(struct dev_event *ev)
{
    if (!ev)
        return;
    ev->dev->ops->event_release(ev);
    xfree(ev);
}

int dev_event_record(struct dev_event *ev, struct dev_stream *s)
{
    if (!ev || !s || ev->dev != s->dev)
        return ERR_INVALID;
    return s->dev->ops->event_record(ev, s);
}

int dev_stream_wait_event(struct dev_stream *s, struct dev_event *ev)
{
    if (!ev || !s || ev->dev != s->dev)
        return ERR_INVALID;
    return s->dev->ops->stream_wait_event(s, ev);
}

int dev_event_sync(struct dev_event *ev) { return ev->dev->ops->event_sync(ev); }
int dev_event_query(struct dev_event *ev) { return ev->dev->ops->event_query(ev); }

/* ---- pinned host memory ---------------------------------------------------------------- */

int dev_host_alloc(struct dev *d, size_t bytes, void **out, int *pinned)
{
    int p = 0;
    int rc = d->ops->host_alloc(d, bytes, out, &p);
    if (pinned)
        *pinned = p;
    return rc;
}

void dev_host_free(struct dev *d, void *ptr)
{
    if (ptr)
        d->ops->host_free(d, ptr);
}

int dev_host_register(struct dev *d, void *ptr, size_t bytes)
{
    return d->ops->host_register ? d->ops->host_register(d, ptr, bytes) : 0;
}

void dev_host_unregister(struct dev *d, void *ptr)
{
    if (d->ops->host_unregister)
        d->ops->host_unregister(d, ptr);
}
