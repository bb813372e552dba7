/*
 * mm_stream.c — the streamer: a model's streamed layers packed in (pinned) host
 * memory, a ring of device slots, and prefetch on a copy stream.
 *
 * Each streamed layer is one contiguous region of the pack, laid out exactly like
 * its device copy, so one layer is one dev_copy_async. With prefetch depth k the
 * ring has k+1 slots: while layer i computes in one slot, layers i+1..i+k are being
 * uploaded into the others. Ordering (memory.md §6.3), per slot s:
 *   copy into s        waits compute_done[s]  (the previous user of s is finished)
 *   compute of s       waits copy_done[s]     (the upload landed)
 *   release of s       records compute_done[s] on the compute stream
 * so a slot is overwritten only after compute is done with it. After the last
 * streamed layer the prefetch wraps to the first ones: the next sampling step's
 * first layers upload during the tail of this one.
 *
 * Slot states: FREE (nothing), READY (upload issued for slot_layer, not yet used),
 * HELD (acquired by compute), DONE (released; data still valid, may be reused if
 * the same layer is asked for again before the slot is recycled).
 */
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "log.h"
#include "mm_internal.h"

enum { SLOT_FREE, SLOT_READY, SLOT_HELD, SLOT_DONE };

struct mm_stream {
    struct dev *d;               /* borrowed */
    struct dev_stream *copy;     /* owned by d; NULL when prefetch == 0 */
    int nslots, prefetch;
    size_t slot_bytes;
    void **slot_buf;             /* owned device buffers */
    struct dev_event **copy_done, **compute_done; /* owned */
    int *slot_layer, *slot_state;
    uint64_t *slot_sig, *slot_tick;
    unsigned char *pack;         /* owned: streamed layers, device layout */
    size_t pack_bytes;
    int pinned;                  /* pack from dev_host_alloc (else xmalloc_aligned) */
    int direct;                  /* no pack (RAM short): copy each weight from its host copy */
    int *order, n;               /* streamed layers in execution order */
    int *pos_of;                 /* layer -> position in order, -1 if resident */
    int nlayers;
    int next_pos;                /* next position to prefetch */
    size_t copied;               /* bytes uploaded since last take */
    uint64_t tick;
};

static int slot_find(const struct mm_stream *st, int layer)
{
    for (int s = 0; s < st->nslots; s++)
        if (st->slot_layer[s] == layer && st->slot_state[s] != SLOT_FREE)
            return s;
    return -1;
}

void mm__stream_free(struct patcher_model *m, struct mm_stream *st)
{
    if (!st)
        return;
    (void)m;
    if (st->copy)
        dev_stream_sync(st->copy); /* nothing may be copying into a slot we free */
    /* Nor computing from one (CUDA kernels queued by the last node). */
    dev_stream_sync(dev_compute_stream(st->d));
    for (int s = 0; s < st->nslots; s++) {
        if (st->copy_done)
            dev_event_free(st->copy_done[s]);
        if (st->compute_done)
            dev_event_free(st->compute_done[s]);
        if (st->slot_buf)
            dev_free(st->d, st->slot_buf[s]);
    }
    dev_stream_free(st->copy);
    if (st->pack) {
        if (st->pinned)
            dev_host_free(st->d, st->pack);
        else
            xfree_aligned(st->pack);
    }
    xfree(st->copy_done);
    xfree(st->compute_done);
    xfree(st->slot_buf);
    xfree(st->slot_layer);
    xfree(st->slot_state);
    xfree(st->slot_sig);
    xfree(st->slot_tick);
    xfree(st->order);
    xfree(st->pos_of);
    xfree(st);
}

int mm__stream_new(struct patcher_model *m, int slots, int prefetch, int use_pinned,
                   struct mm_stream **out, struct err *e)
{
    *out = NULL;
    struct mm_stream *st = xcalloc(1, sizeof(*st));
    st->d = m->dev;
    st->nlayers = m->nlayers;
    st->pos_of = xmalloc((size_t)(m->nlayers ? m->nlayers : 1) * sizeof(int));
    st->order = xmalloc((size_t)(m->nlayers ? m->nlayers : 1) * sizeof(int));
    for (int i = 0; i < m->nlayers; i++) {
        struct pm_layer *L = &m->layers[i];
        st->pos_of[i] = -1;
        L->pack_off = SIZE_MAX;
        if (L->resident)
            continue;
        L->pack_off = st->pack_bytes;
        st->pack_bytes += (L->bytes + MM_ALIGN - 1) & ~(size_t)(MM_ALIGN - 1);
        if (L->bytes > st->slot_bytes)
            st->slot_bytes = L->bytes;
        st->pos_of[i] = st->n;
        st->order[st->n++] = i;
    }
    int rc = 0;
    if (st->n == 0) {
        *out = st;
        return 0;
    }
    st->prefetch = prefetch;
    st->nslots = slots;
    ASSERT(slots >= 1 && (prefetch == 0 || slots >= prefetch + 1));
    st->slot_buf = xcalloc((size_t)slots, sizeof(void *));
    st->copy_done = xcalloc((size_t)slots, sizeof(void *));
    st->compute_done = xcalloc((size_t)slots, sizeof(void *));
    st->slot_layer = xmalloc((size_t)slots * sizeof(int));
    st->slot_state = xcalloc((size_t)slots, sizeof(int));
    st->slot_sig = xcalloc((size_t)slots, sizeof(uint64_t));
    st->slot_tick = xcalloc((size_t)slots, sizeof(uint64_t));
    for (int s = 0; s < slots; s++) {
        st->slot_layer[s] = -1;
        if ((rc = dev_alloc(st->d, st->slot_bytes, &st->slot_buf[s])) < 0) {
            err_set(e, rc, "cannot allocate streaming ring for '%s': %d x %zu bytes", m->name,
                    slots, st->slot_bytes);
            goto fail;
        }
        if ((rc = dev_event_new(st->d, &st->copy_done[s])) < 0 ||
            (rc = dev_event_new(st->d, &st->compute_done[s])) < 0) {
            err_set(e, rc, "cannot create streaming events for '%s'", m->name);
            goto fail;
        }
    }
    if (prefetch > 0 && (rc = dev_stream_new(st->d, &st->copy)) < 0) {
        err_set(e, rc, "cannot create a copy stream for '%s'", m->name);
        goto fail;
    }
    /*
     * The pack: pinned so uploads are asynchronous DMA (pageable falls back, logged once
     * by the device). Filled once here, from the host copy. It is a second host copy
     * of the streamed layers, so it is made only when available RAM keeps 2 GiB of
     * headroom (memory.md §6.5); otherwise each weight is copied from the host copy
     * itself (mmap / pageable: slower, one copy per weight, but no RAM).
     */
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    size_t avail = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : SIZE_MAX;
    if (avail < st->pack_bytes + ((size_t)2 << 30) && dev_kind(st->d) == DEV_KIND_CUDA) {
        log_info("streaming '%s' straight from its host copy: %zu MiB would not leave "
                 "RAM headroom", m->name, st->pack_bytes >> 20);
        st->direct = 1;
    } else if (use_pinned) {
        int pinned = 0;
        if ((rc = dev_host_alloc(st->d, st->pack_bytes, (void **)&st->pack, &pinned)) < 0) {
            err_set(e, rc, "cannot allocate %zu bytes of host memory for streaming '%s'",
                    st->pack_bytes, m->name);
            goto fail;
        }
        st->pinned = 1;
    } else {
        st->pack = xmalloc_aligned(4096, st->pack_bytes);
    }
    for (int k = 0; !st->direct && k < st->n; k++) {
        const struct pm_layer *L = &m->layers[st->order[k]];
        for (int j = 0; j < L->nw; j++)
            pm__weight_to_host(&L->w[j], st->pack + L->pack_off + L->w[j].off);
    }
    *out = st;
    return 0;
fail:
    mm__stream_free(m, st);
    return rc;
}

size_t mm__stream_device_bytes(const struct mm_stream *st)
{
    return st ? (size_t)st->nslots * st->slot_bytes : 0;
}
size_t mm__stream_slot_bytes(const struct mm_stream *st) { return st ? st->slot_bytes : 0; }
size_t mm__stream_pack_bytes(const struct mm_stream *st)
{
    return st && !st->direct ? st->pack_bytes : 0;
}
int mm__stream_slots(const struct mm_stream *st) { return st ? st->nslots : 0; }
int mm__stream_prefetch(const struct mm_stream *st) { return st ? st->prefetch : 0; }

void mm__stream_sync(struct mm_stream *st)
{
    if (st && st->copy)
        dev_stream_sync(st->copy);
}

size_t mm__stream_take_copied(struct mm_stream *st)
{
    if (!st)
        return 0;
    size_t n = st->copied;
    st->copied = 0;
    return n;
}

uint64_t *mm__stream_slot_sig(struct mm_stream *st, int slot) { return &st->slot_sig[slot]; }
int mm__stream_slot_of(struct mm_stream *st, int layer) { return slot_find(st, layer); }

static const struct pm_layer *layer_of(struct patcher_model *m, int layer)
{
    return &m->layers[layer];
}

/* Upload `layer` into slot s: after compute is done with s, on the copy stream. */
static int issue_copy(struct patcher_model *m, struct mm_stream *st, int s, int layer)
{
    const struct pm_layer *L = layer_of(m, layer);
    int rc;
    if (st->direct) {
        for (int j = 0; j < L->nw; j++) {
            const struct pm_weight *w = &L->w[j];
            char *dst = (char *)st->slot_buf[s] + w->off;
            if (w->host_dt != w->dt) {
                /* A narrow host copy is widened through staging, synchronously: wait
                 * until compute is done with the slot first. */
                if (st->copy && (rc = dev_event_sync(st->compute_done[s])) < 0)
                    return rc;
                rc = pm__copy_weight(st->d, w, dst);
            } else {
                rc = st->copy ? dev_copy_async(st->d, st->copy, DEV_COPY_H2D, dst, w->host,
                                               w->bytes)
                              : dev_copy(st->d, DEV_COPY_H2D, dst, w->host, w->bytes);
            }
            if (rc < 0)
                return rc;
        }
        if (st->copy && (rc = dev_event_record(st->copy_done[s], st->copy)) < 0)
            return rc;
        goto done;
    }
    const void *src = st->pack + L->pack_off;
    if (st->copy) {
        if ((rc = dev_stream_wait_event(st->copy, st->compute_done[s])) < 0 ||
            (rc = dev_copy_async(st->d, st->copy, DEV_COPY_H2D, st->slot_buf[s], src,
                                 L->bytes)) < 0 ||
            (rc = dev_event_record(st->copy_done[s], st->copy)) < 0)
            return rc;
    } else {
        /* No copy stream (--disable-async-offload): compute is done with the slot
         * because we run in its order; the copy is synchronous. */
        if ((rc = dev_copy(st->d, DEV_COPY_H2D, st->slot_buf[s], src, L->bytes)) < 0)
            return rc;
    }
done:
    st->slot_layer[s] = layer;
    st->slot_state[s] = SLOT_READY;
    st->slot_sig[s] = 0;
    st->copied += L->bytes;
    return 0;
}

/* A slot that may be overwritten: FREE first, else the least recently released. */
static int pick_victim(const struct mm_stream *st)
{
    int best = -1;
    for (int s = 0; s < st->nslots; s++) {
        if (st->slot_state[s] == SLOT_FREE)
            return s;
        if (st->slot_state[s] == SLOT_DONE &&
            (best < 0 || st->slot_tick[s] < st->slot_tick[best]))
            best = s;
    }
    return best;
}

/* Keep `prefetch` layers READY ahead of compute, wrapping into the next step. */
static void fill(struct patcher_model *m, struct mm_stream *st)
{
    if (st->prefetch == 0 || st->n == 0)
        return;
    int ready = 0;
    for (int s = 0; s < st->nslots; s++)
        ready += st->slot_state[s] == SLOT_READY;
    for (int iter = 0; iter < st->n && ready < st->prefetch; iter++) {
        int layer = st->order[st->next_pos];
        int s = slot_find(st, layer);
        if (s >= 0 && st->slot_state[s] == SLOT_DONE) {
            st->slot_state[s] = SLOT_READY; /* still there: no copy needed */
            ready++;
        } else if (s < 0) {
            int v = pick_victim(st);
            if (v < 0)
                break;
            if (issue_copy(m, st, v, layer) < 0)
                break; /* acquire will retry synchronously and report */
            ready++;
        }
        st->next_pos = (st->next_pos + 1) % st->n;
    }
}

int mm__stream_acquire(struct patcher_model *m, struct mm_stream *st, int layer, void **data,
                       struct err *e)
{
    int pos = st->pos_of[layer];
    ASSERT(pos >= 0);
    /* READY slots outside the window after `pos` are stale guesses: keep their data
     * (DONE) but stop counting them as prefetched. */
    for (int s = 0; s < st->nslots; s++) {
        if (st->slot_state[s] != SLOT_READY)
            continue;
        int d = (st->pos_of[st->slot_layer[s]] - pos + st->n) % st->n;
        if (d > st->prefetch)
            st->slot_state[s] = SLOT_DONE;
    }
    int s = slot_find(st, layer), rc;
    if (s >= 0 && st->slot_state[s] == SLOT_HELD)
        return err_set(e, ERR_BUSY, "layer %d of '%s' is already held", layer, m->name);
    if (s < 0) {
        s = pick_victim(st);
        if (s < 0) {
            /* Every slot is READY or HELD: take the READY one needed last. */
            int far = -1;
            for (int t = 0; t < st->nslots; t++) {
                if (st->slot_state[t] != SLOT_READY)
                    continue;
                int d = (st->pos_of[st->slot_layer[t]] - pos + st->n) % st->n;
                if (far < 0 || d > far) {
                    far = d;
                    s = t;
                }
            }
        }
        if (s < 0)
            return err_set(e, ERR_BUSY,
                           "model '%s': all %d streaming slots are held (release layers)",
                           m->name, st->nslots);
        if ((rc = issue_copy(m, st, s, layer)) < 0)
            return err_set(e, rc, "cannot upload layer %d of '%s'", layer, m->name);
    }
    if (st->copy && (rc = dev_stream_wait_event(dev_compute_stream(st->d), st->copy_done[s])) < 0)
        return err_set(e, rc, "cannot wait for layer %d of '%s'", layer, m->name);
    st->slot_state[s] = SLOT_HELD;
    st->next_pos = (pos + 1) % st->n;
    fill(m, st);
    *data = st->slot_buf[s];
    return s;
}

void mm__stream_release(struct patcher_model *m, struct mm_stream *st, int layer)
{
    int s = slot_find(st, layer);
    if (s < 0 || st->slot_state[s] != SLOT_HELD)
        return;
    st->slot_state[s] = SLOT_DONE;
    st->slot_tick[s] = ++st->tick;
    if (st->copy && dev_event_record(st->compute_done[s], dev_compute_stream(st->d)) < 0) {
        /* Without the event the slot cannot be reused safely: wait for compute. */
        dev_stream_sync(dev_compute_stream(st->d));
    }
    fill(m, st);
}
