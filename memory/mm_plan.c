/*
 * mm_plan.c — load_models_gpu: eviction, the resident/streamed choice, loading.
 *
 * Bytes, all exact (dev_bytes_used is the allocator's own sum):
 *   cap      = min(budget, used + device free) - reserve
 *   extra    = activation peak + workspace + patch workspace   (the node's plan)
 *   the requested models may use  cap - used + (their own device bytes) - extra
 * A model's device bytes = its resident layers + its ring (slots x slot bytes), each
 * weight at its compute dtype (what the upload writes: f32 for an f16 file in fp32
 * compute); on the cpu device clean layers are the host copies used in place, counted at
 * their own dtype (full_bytes). Host bytes (the copies at file dtype, the stream pack)
 * are reported beside them (memmgr.h, struct mm_model_plan), never mixed in.
 *
 * Cost model (memory.md §10.4): per layer t_copy = bytes / bandwidth + latency, and
 * t_comp = measured (patcher_release on host devices) or FLOPs / assumed rate, or 0
 * when nothing is known (then every streamed byte counts as exposed, which makes the
 * choice ComfyUI's: biggest layers resident). Candidate plans differ in the ring's
 * slot size (every layer bigger than it must be resident) and depth; within one,
 * layers are made resident greedily by exposed copy time per byte. Each candidate is
 * scored by simulating the copy/compute pipeline (predicted ms) plus a small charge
 * per streamed byte, and the best is taken.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "mm_plan.h"

struct model_plan {
    struct patcher *p;       /* borrowed */
    struct patcher_model *m; /* borrowed */
    struct dev *d;           /* borrowed: target device */
    unsigned char *res;      /* owned: per-layer resident flag */
    int slots, prefetch;
    size_t slot_bytes, resident_bytes, streamed_bytes;
    double predicted_ms;
};

typedef long long ssize_b; /* signed byte counts for deficits */


/* Sizes in messages: MiB with one decimal, or exact bytes below 64 MiB, so that a refusal
 * on a small model does not read "cannot run in 1 MiB: needs at least 1 MiB". */
static const char *fmt_bytes(char out[32], long long bytes)
{
    if (bytes < 0)
        bytes = 0;
    if (bytes >= (64LL << 20))
        snprintf(out, 32, "%.1f MiB", bytes / 1048576.0);
    else
        snprintf(out, 32, "%lld bytes", bytes);
    return out;
}

static void layer_times(const struct mm *mm, const struct pm_layer *L, double *t_copy,
                        double *t_comp)
{
    *t_copy = (double)L->bytes / mm->bw * 1e3 + mm->lat_ms;
    if (L->comp_ms >= 0)
        *t_comp = L->comp_ms;
    else if (L->flops > 0)
        *t_comp = L->flops / mm->flops_rate * 1e3;
    else
        *t_comp = 0;
}

/* Simulate one pass: copies serial on the copy engine, compute serial, slot reuse
 * after the previous user's compute, compute after its copy. */
static double pipeline_ms(const struct mm *mm, const struct patcher_model *m,
                          const unsigned char *res, int slots, int prefetch)
{
    double copy_free = 0, comp_end = 0, slot_free[16] = {0};
    int j = 0;
    for (int i = 0; i < m->nlayers; i++) {
        double tc, tp;
        layer_times(mm, &m->layers[i], &tc, &tp);
        if (res[i]) {
            comp_end += tp;
            continue;
        }
        int s = j++ % slots;
        double start = prefetch ? fmax(copy_free, slot_free[s]) : comp_end;
        double copy_end = start + tc;
        copy_free = copy_end;
        comp_end = fmax(comp_end, copy_end) + tp;
        slot_free[s] = comp_end;
    }
    return comp_end;
}

struct lkey {
    int idx;
    double key;
    size_t bytes;
};

static int cmp_keep(const void *a, const void *b)
{
    const struct lkey *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return x->idx - y->idx;
}

/* Layers sorted by how much keeping them resident is worth (best first). */
static struct lkey *keep_order(const struct mm *mm, const struct patcher_model *m)
{
    struct lkey *k = xmalloc((size_t)(m->nlayers ? m->nlayers : 1) * sizeof(*k));
    for (int i = 0; i < m->nlayers; i++) {
        double tc, tp;
        layer_times(mm, &m->layers[i], &tc, &tp);
        size_t b = m->layers[i].bytes ? m->layers[i].bytes : 1;
        k[i] = (struct lkey){i, (tc - tp) / (double)b, m->layers[i].bytes};
    }
    qsort(k, (size_t)m->nlayers, sizeof(*k), cmp_keep);
    return k;
}

static int full_only(const struct mm *mm, const struct mm_request *req)
{
    return req->force_full_load || mm->state == MM_VRAM_HIGH_VRAM ||
           mm->state == MM_VRAM_SHARED;
}

/* The smallest device footprint a model can run with (one slot, synchronous). */
static size_t min_bytes(const struct mm *mm, const struct patcher_model *m, int full)
{
    size_t total = patcher_model_bytes(m);
    if (full)
        return total;
    size_t best = total;
    for (int c = 0; c < m->nlayers; c++) {
        size_t cap = m->layers[c].bytes, forced = 0;
        for (int i = 0; i < m->nlayers; i++)
            if (m->layers[i].bytes > cap)
                forced += m->layers[i].bytes;
        if (mm->state == MM_VRAM_NO_VRAM && forced)
            continue;
        if (forced + cap < best)
            best = forced + cap;
    }
    return best;
}

/* The device bytes of a full load: the layout's bytes (every weight at its compute
 * dtype, what an upload writes), except on the cpu device, where clean layers are the
 * host copies used in place, at their own (file) dtype. */
static size_t full_bytes(const struct patcher_model *m, struct dev *d)
{
    return dev_kind(d) == DEV_KIND_CPU ? patcher_model_host_bytes(m, NULL)
                                       : patcher_model_bytes(m);
}

/*
 * Choose the resident set and ring for `m` within `allow` bytes. Returns 0 or
 * ERR_DEVICE_OOM (with a message) when no plan fits.
 */
static int choose(const struct mm *mm, struct model_plan *mp, ssize_b allow, int full,
                  struct err *e)
{
    const struct patcher_model *m = mp->m;
    size_t total = full_bytes(m, mp->d);
    int n = m->nlayers;
    mp->res = xcalloc((size_t)(n ? n : 1), 1);
    if (full || (mm->state != MM_VRAM_NO_VRAM && allow >= (ssize_b)total)) {
        if (allow < (ssize_b)total)
        {
            char need[32], have[32];
            return err_set(e, ERR_DEVICE_OOM,
                           "model '%s' needs %s loaded in full but only %s are free beside "
                           "the node's activations (full load forced)",
                           m->name, fmt_bytes(need, (long long)total), fmt_bytes(have, allow));
        }
        memset(mp->res, 1, (size_t)n);
        mp->resident_bytes = total;
        mp->predicted_ms = pipeline_ms(mm, m, mp->res, 1, 0);
        return 0;
    }
    struct lkey *order = keep_order(mm, m);
    unsigned char *cand = xcalloc((size_t)(n ? n : 1), 1);
    double best_score = INFINITY;
    /*
     * The depth comes from the budget: every k from the configured maximum down to 2
     * competes on its simulated pipeline (a deeper ring hides a big layer's copy behind
     * several cheap layers' compute, but its slots take bytes resident layers could
     * use); k = 1, then 0 (no overlap), only when no deeper ring fits at all.
     */
    int tier_found = -1;
    for (int k = mm->prefetch; k >= 0; k--) {
        int tier = k >= 2 ? 0 : k == 1 ? 1 : 2;
        if (tier_found >= 0 && tier > tier_found)
            break;
        int slots = k ? k + 1 : 1;
        for (int c = 0; c < n; c++) {
            size_t cap = m->layers[c].bytes;
            if (c > 0 && cap == m->layers[c - 1].bytes)
                continue; /* same candidate as the previous layer */
            ssize_b left = allow - (ssize_b)slots * (ssize_b)cap;
            memset(cand, 0, (size_t)n);
            for (int i = 0; i < n; i++)
                if (m->layers[i].bytes > cap) {
                    cand[i] = 1;
                    left -= (ssize_b)m->layers[i].bytes;
                }
            if (left < 0 || (mm->state == MM_VRAM_NO_VRAM && left != allow - (ssize_b)slots *
                                                                      (ssize_b)cap))
                continue;
            if (mm->state != MM_VRAM_NO_VRAM)
                for (int t = 0; t < n; t++) {
                    int i = order[t].idx;
                    if (!cand[i] && (ssize_b)m->layers[i].bytes <= left) {
                        cand[i] = 1;
                        left -= (ssize_b)m->layers[i].bytes;
                    }
                }
            size_t streamed = 0, smax = 0, resident = 0;
            for (int i = 0; i < n; i++) {
                if (cand[i]) {
                    resident += m->layers[i].bytes;
                } else {
                    streamed += m->layers[i].bytes;
                    if (m->layers[i].bytes > smax)
                        smax = m->layers[i].bytes;
                }
            }
            if (streamed == 0)
                continue; /* would be a full load, which did not fit */
            double pred = pipeline_ms(mm, m, cand, slots, k);
            /* Traffic costs a little even when hidden: prefer more resident bytes. */
            double score = pred + 1e-3 * (double)streamed / mm->bw * 1e3;
            if (score < best_score) {
                best_score = score;
                tier_found = tier;
                memcpy(mp->res, cand, (size_t)n);
                mp->slots = slots;
                mp->prefetch = k;
                mp->slot_bytes = smax;
                mp->resident_bytes = resident;
                mp->streamed_bytes = streamed;
                mp->predicted_ms = pred;
            }
        }
    }
    xfree(cand);
    xfree(order);
    if (best_score == INFINITY) {
        char have[32], need[32];
        return err_set(e, ERR_DEVICE_OOM,
                       "model '%s' cannot run in %s beside the node's activations: it needs at "
                       "least %s (one layer slot)",
                       m->name, fmt_bytes(have, allow), fmt_bytes(need, (long long)min_bytes(mm, m, 0)));
    }
    return 0;
}

/* ---- eviction ------------------------------------------------------------------------ */

static int in_list(struct patcher *const *list, int n, const struct patcher_model *m)
{
    for (int i = 0; i < n; i++)
        if (list[i] && list[i]->model == m)
            return 1;
    return 0;
}

struct cand {
    struct patcher_model *m;
    int later;
    size_t bytes;
};

/* Eviction order: not needed later first; then cheapest reload (fewest device bytes:
 * all reload from host RAM at the same bandwidth); then least recently used. */
static int cmp_evict(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->later != y->later)
        return x->later - y->later;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? -1 : 1;
    return x->m->last_use < y->m->last_use ? -1 : x->m->last_use > y->m->last_use;
}

static int cmp_shed(const void *a, const void *b)
{
    return -cmp_keep(a, b); /* least worth keeping first */
}

/* Free at least `want` device bytes from m (its ring first, then its least valuable
 * resident layers); unloads it fully when nothing is left. Returns bytes freed. */
static size_t shed(struct mm *mm, struct patcher_model *m, size_t want, int *unloaded)
{
    size_t before = mm__model_device_bytes(m), freed = 0;
    if (m->st) {
        mm__stream_free(m, m->st);
        m->st = NULL;
    }
    freed = before - mm__model_device_bytes(m);
    if (freed < want && m->resident_bytes) {
        struct lkey *order = keep_order(mm, m);
        qsort(order, (size_t)m->nlayers, sizeof(*order), cmp_shed);
        for (int t = 0; t < m->nlayers && freed < want; t++) {
            struct pm_layer *L = &m->layers[order[t].idx];
            if (!L->dev_buf)
                continue;
            freed += L->bytes;
            mm__layer_evict(m, L);
        }
        xfree(order);
    }
    if (m->resident_bytes == 0) {
        log_info("unloaded model '%s' (%zu MiB)", m->name, before >> 20);
        mm__unload_model(m);
        (*unloaded)++;
    } else {
        log_info("unloaded partially model '%s': %zu MiB freed, %zu MiB stay", m->name,
                 freed >> 20, m->resident_bytes >> 20);
    }
    return freed;
}

static void evict(struct mm *mm, const struct mm_request *req, ssize_b deficit_full,
                  ssize_b deficit_min, struct mm_report *rep)
{
    struct cand *c = xmalloc((size_t)(mm->nloaded ? mm->nloaded : 1) * sizeof(*c));
    int nc = 0;
    for (int i = 0; i < mm->nloaded; i++) {
        struct patcher_model *m = mm->loaded[i];
        if (m->dev != mm->dev || in_list(req->models, req->n_models, m))
            continue;
        c[nc++] = (struct cand){m, in_list(req->later, req->n_later, m),
                                mm__model_device_bytes(m)};
    }
    qsort(c, (size_t)nc, sizeof(*c), cmp_evict);
    for (int i = 0; i < nc; i++) {
        size_t freed;
        if (mm->cfg.disable_smart_memory) {
            freed = shed(mm, c[i].m, SIZE_MAX, &rep->models_unloaded);
        } else {
            ssize_b deficit = c[i].later ? deficit_min : deficit_full;
            if (deficit <= 0)
                continue;
            freed = shed(mm, c[i].m, (size_t)deficit, &rep->models_unloaded);
        }
        rep->bytes_unloaded += freed;
        deficit_full -= (ssize_b)freed;
        deficit_min -= (ssize_b)freed;
    }
    xfree(c);
}

/* ---- applying a plan --------------------------------------------------------------------- */

static int same_stream_layout(const struct model_plan *mp)
{
    const struct patcher_model *m = mp->m;
    if (!m->st)
        return 0;
    if (mm__stream_slots(m->st) != mp->slots || mm__stream_prefetch(m->st) != mp->prefetch ||
        mm__stream_slot_bytes(m->st) != mp->slot_bytes)
        return 0;
    for (int i = 0; i < m->nlayers; i++)
        if (!!m->layers[i].resident != !!mp->res[i])
            return 0;
    return 1;
}

/* Phase 1 of applying plans: give back what the new plans no longer hold, for every
 * model, before any model grows, so the sum never passes the budget in between. */
static void apply_shrink(struct mm *mm, struct model_plan *mp)
{
    struct patcher_model *m = mp->m;
    if (m->mm && (m->mm != mm || m->dev != mp->d))
        mm__unload_model(m);
    if (!m->mm)
        return;
    if (!same_stream_layout(mp)) {
        mm__stream_free(m, m->st);
        m->st = NULL;
    }
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].resident && !mp->res[i])
            mm__layer_evict(m, &m->layers[i]);
}

static int apply_grow(struct mm *mm, struct model_plan *mp, struct mm_report *rep,
                      struct err *e)
{
    struct patcher_model *m = mp->m;
    int rc;
    m->dev = mp->d;
    m->zero_copy = dev_kind(mp->d) == DEV_KIND_CPU;
    m->pages_live = 1; /* uploads and the stream pack read the host copy below */
    mm__track(mm, m);
    for (int i = 0; i < m->nlayers; i++) {
        struct pm_layer *L = &m->layers[i];
        if (!mp->res[i] || L->resident)
            continue;
        if (!m->zero_copy) {
            if ((rc = dev_alloc(m->dev, L->bytes, &L->dev_buf)) < 0)
                return err_set(e, rc, "cannot allocate layer '%s' of '%s' (%zu bytes)",
                               L->name, m->name, L->bytes);
            m->resident_bytes += L->bytes;
            if ((rc = pm__upload_layer(m->dev, L, L->dev_buf)) < 0)
                return err_set(e, rc, "cannot upload layer '%s' of '%s'", L->name, m->name);
            rep->bytes_loaded += L->bytes;
        }
        L->resident = 1;
        L->dev_sig = 0;
    }
    /* Bake this patcher's patches into resident copies now, once, not per step. */
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].resident && (rc = pm__bake_resident(mp->p, i, e)) < 0)
            return rc;
    int streams = 0;
    for (int i = 0; i < m->nlayers; i++)
        streams |= !mp->res[i];
    if (streams && !m->st &&
        (rc = mm__stream_new(m, mp->slots, mp->prefetch, mm->use_pinned, &m->st, e)) < 0)
        return rc;
    mm__stream_take_copied(m->st);
    m->passes = 0;
    return 0;
}

/* ---- the entry point --------------------------------------------------------------------- */

static ssize_b capacity(struct mm *mm)
{
    size_t fr = 0, tot = 0;
    dev_mem_info(mm->dev, &fr, &tot);
    size_t used = dev_bytes_used(mm->dev);
    size_t cap = used + fr;
    if (dev_bytes_budget(mm->dev) < cap)
        cap = dev_bytes_budget(mm->dev);
    return (ssize_b)cap - (ssize_b)mm->reserve;
}

static void fill_model_report(const struct model_plan *mp, struct mm_model_plan *r)
{
    const struct patcher_model *m = mp->m;
    snprintf(r->name, sizeof(r->name), "%s", m->name);
    r->layers = m->nlayers;
    for (int i = 0; i < m->nlayers; i++)
        r->layers_resident += !!mp->res[i];
    r->layers_streamed = r->layers - r->layers_resident;
    r->bytes_resident = mp->resident_bytes;
    r->bytes_streamed = mp->streamed_bytes;
    r->ring_slots = mp->streamed_bytes ? mp->slots : 0;
    r->ring_bytes = mp->streamed_bytes ? (size_t)mp->slots * mp->slot_bytes : 0;
    r->prefetch = mp->streamed_bytes ? mp->prefetch : 0;
    r->bytes_host = patcher_model_host_bytes(m, NULL);
    r->bytes_pack = mm__stream_pack_bytes(m->st);
}

static void plans_release(struct model_plan *mp, int n)
{
    for (int i = 0; i < n; i++) {
        xfree(mp[i].res);
        mp[i].res = NULL;
    }
}

static int cmp_plan_size(const void *a, const void *b)
{
    size_t x = patcher_model_bytes(((const struct model_plan *)a)->m);
    size_t y = patcher_model_bytes(((const struct model_plan *)b)->m);
    return x < y ? -1 : x > y;
}

/*
 * The node's activations alone exceed what the device can ever give it (a request
 * for a huge image): nothing to evict or stream would help. Said in torch's
 * out-of-memory shape with the size asked for.
 */
static int oom_activations(const struct mm *mm, const struct model_plan *mp, int n,
                           size_t extra, ssize_b cap, struct err *e)
{
    char want[32], have[32];
    return err_set(e, ERR_DEVICE_OOM,
                   "Allocation on device %s would exceed available memory: tried to allocate "
                   "%s (%zu bytes) for the activations of '%s' with %s available",
                   dev_name(mm->dev), alloc_fmt_bytes(want, extra), extra,
                   n > 0 ? mp[0].m->name : "?", alloc_fmt_bytes(have, cap > 0 ? (size_t)cap : 0));
}

static int plan_and_load(struct mm *mm, const struct mm_request *req, struct model_plan *mp,
                         int n, ssize_b cap, struct mm_report *rep, int *alloc_failed,
                         struct err *e)
{
    int full = full_only(mm, req), rc;
    size_t extra = req->activation_bytes + req->workspace_bytes + rep->patch_workspace_bytes;
    size_t mine = 0, need_full = extra, need_min = extra;
    for (int i = 0; i < n; i++) {
        if (mp[i].d != mm->dev)
            continue;
        if (mp[i].m->mm == mm && mp[i].m->dev == mm->dev)
            mine += mm__model_device_bytes(mp[i].m);
        need_full += patcher_model_bytes(mp[i].m);
        need_min += min_bytes(mm, mp[i].m, full);
    }
    if ((ssize_b)extra > cap)
        return oom_activations(mm, mp, n, extra, cap, e);
    ssize_b free_now = cap - (ssize_b)dev_bytes_used(mm->dev);
    evict(mm, req, (ssize_b)need_full - (ssize_b)mine - free_now,
          (ssize_b)need_min - (ssize_b)mine - free_now, rep);
    free_now = cap - (ssize_b)dev_bytes_used(mm->dev);
    ssize_b avail = free_now + (ssize_b)mine - (ssize_b)extra;

    /* Smaller models first: each may take what the later ones' minimums leave. */
    qsort(mp, (size_t)n, sizeof(*mp), cmp_plan_size);
    for (int i = 0; i < n; i++) {
        if (mp[i].d != mm->dev) {
            /* The cpu device: weights used in place, nothing to plan. */
            mp[i].res = xcalloc((size_t)(mp[i].m->nlayers ? mp[i].m->nlayers : 1), 1);
            memset(mp[i].res, 1, (size_t)mp[i].m->nlayers);
            mp[i].resident_bytes = full_bytes(mp[i].m, mp[i].d);
            continue;
        }
        ssize_b rest_min = 0;
        for (int j = i + 1; j < n; j++)
            if (mp[j].d == mm->dev)
                rest_min += (ssize_b)min_bytes(mm, mp[j].m, full);
        if ((rc = choose(mm, &mp[i], avail - rest_min, full, e)) < 0)
            return rc;
        avail -= (ssize_b)(mp[i].resident_bytes + (mp[i].streamed_bytes
                                                       ? (size_t)mp[i].slots * mp[i].slot_bytes
                                                       : 0));
    }
    for (int i = 0; i < n; i++)
        apply_shrink(mm, &mp[i]);
    for (int i = 0; i < n; i++)
        if ((rc = apply_grow(mm, &mp[i], rep, e)) < 0) {
            *alloc_failed = rc == ERR_DEVICE_OOM;
            return rc;
        }
    return 0;
}

int mm_load_models(struct mm *mm, const struct mm_request *req, struct mm_report *rep,
                   struct err *e)
{
    struct mm_report local;
    if (!rep)
        rep = &local;
    memset(rep, 0, sizeof(*rep));
    if (!req || req->n_models < 0 || req->n_models > MM_MAX_MODELS || req->n_later < 0 ||
        req->n_later > MM_MAX_MODELS)
        return err_set(e, ERR_INVALID, "load request: bad model count");
    double t0 = clock_mono_sec() * 1e3;
    /* Evicting frees buffers the previous node's queued kernels may still read. */
    dev_stream_sync(dev_compute_stream(mm->dev));
    mm->tick++;
    mm->ncur = 0;
    dev_peak_reset(mm->dev);
    snprintf(rep->device, sizeof(rep->device), "%s", dev_name(mm->dev));
    rep->activation_bytes = req->activation_bytes;
    rep->workspace_bytes = req->workspace_bytes;

    struct model_plan mp[MM_MAX_MODELS];
    int n = 0;
    for (int i = 0; i < req->n_models; i++) {
        struct patcher *p = req->models[i];
        if (!p)
            return err_set(e, ERR_INVALID, "load request: model %d is NULL", i);
        if (in_list(req->models, i, p->model))
            continue; /* a model twice (two clones) is planned once, for the first */
        memset(&mp[n], 0, sizeof(mp[n]));
        mp[n].p = p;
        mp[n].m = p->model;
        mp[n].d = mm->dev;
        if (mm->state == MM_VRAM_LOW_VRAM && p->model->role == PATCHER_ROLE_TEXT_ENCODER)
            mp[n].d = mm__cpu_device(mm); /* --lowvram: text encoders on the CPU (§7.5) */
        p->model->last_use = mm->tick;
        size_t pw = pm__patch_workspace(p);
        if (mp[n].d == mm->dev && pw > rep->patch_workspace_bytes)
            rep->patch_workspace_bytes = pw;
        n++;
    }

    ssize_b cap = capacity(mm);
    rep->budget = cap > 0 ? (size_t)cap : 0;
    int alloc_failed = 0;
    int rc = plan_and_load(mm, req, mp, n, cap, rep, &alloc_failed, e);
    if (rc < 0 && alloc_failed) {
        /*
         * A plan that fit on paper failed to allocate: the device had less than it
         * reported (another process, fragmentation). Drop what this request loaded,
         * shrink the capacity to what is really free now, less a margin, and try once
         * more. (A plan that does not fit on paper fails at once: retrying is moot.)
         */
        log_warn("load failed (%s); shrinking the plan and retrying once", e ? e->msg : "");
        for (int i = 0; i < n; i++)
            mm__unload_model(mp[i].m);
        plans_release(mp, n);
        err_clear(e);
        ssize_b cap2 = capacity(mm);
        ssize_b margin = cap2 / 16;
        cap = (cap2 < cap ? cap2 : cap) - margin;
        rep->retried = 1;
        rep->budget = cap > 0 ? (size_t)cap : 0;
        rc = plan_and_load(mm, req, mp, n, cap, rep, &alloc_failed, e);
    }
    if (rc < 0) {
        for (int i = 0; i < n; i++)
            mm__unload_model(mp[i].m);
        plans_release(mp, n);
        mm__publish(mm);
        return rc;
    }
    rep->n_models = n;
    for (int i = 0; i < n; i++) {
        fill_model_report(&mp[i], &rep->models[i]);
        rep->bytes_resident += mp[i].resident_bytes;
        rep->bytes_streamed += mp[i].streamed_bytes;
        rep->bytes_host += rep->models[i].bytes_host;
        rep->bytes_pack += rep->models[i].bytes_pack;
        rep->predicted_ms += mp[i].predicted_ms;
        mm->cur[mm->ncur++] = mp[i].m;
        const struct mm_model_plan *r = &rep->models[i];
        if (r->layers_streamed)
            log_info("loaded partially '%s': %zu MiB resident, %zu MiB streamed (%d of %d "
                     "layers), ring %d x %zu MiB, prefetch %d, %s compute; host %zu MiB "
                     "weights + %zu MiB stream pack",
                     r->name, r->bytes_resident >> 20, r->bytes_streamed >> 20,
                     r->layers_streamed, r->layers, r->ring_slots,
                     r->ring_slots ? (r->ring_bytes / (size_t)r->ring_slots) >> 20 : 0,
                     r->prefetch, tensor_precision_name(mp[i].m->prec), r->bytes_host >> 20,
                     r->bytes_pack >> 20);
        else if (dev_kind(mp[i].d) == DEV_KIND_CPU)
            log_info("loaded completely '%s': %zu MiB of host weights used in place on %s, "
                     "%s compute", r->name, r->bytes_resident >> 20, dev_name(mp[i].d),
                     tensor_precision_name(mp[i].m->prec));
        else
            log_info("loaded completely '%s': %zu MiB on %s (host %zu MiB), %s compute",
                     r->name, r->bytes_resident >> 20, dev_name(mp[i].d), r->bytes_host >> 20,
                     tensor_precision_name(mp[i].m->prec));
    }
    plans_release(mp, n);
    mm__publish(mm);
    mm__drop_idle_pages(mm, req);
    /*
     * The cpu device's block cache and weight scratch hold what this node can reuse
     * (device.h, tensor.h), not what the model or an earlier node needed. Why 3/4 of
     * the activation peak: f16 SD1.5 txt2img on 2 threads, peak RSS at 256^2 / 512^2
     * and the 512^2 VAE decode's CPU time (base: 2 GiB cache, 23.8-24.7 s): the whole
     * peak 2450 / 3404 MiB, 23.4 s; 3/4 2406 / 3376 MiB, 25.3 s; half 2381-2393 /
     * 3196-3210 MiB, 26.3-27.0 s (its large blocks fault in again). 3/4 keeps both
     * sizes under stable-diffusion.cpp's peak (2435 / 3693 MiB) with the decode near
     * its old speed.
     */
    dev_fit_cache(mm->dev, (req->activation_bytes + req->workspace_bytes +
                            rep->patch_workspace_bytes) / 4 * 3);
    tensor_cpu_scratch_release();
    mm->node_t0 = clock_mono_sec() * 1e3;
    rep->load_ms = mm->node_t0 - t0;
    return 0;
}

void mm_node_end(struct mm *mm, struct mm_report *rep)
{
    struct mm_report local;
    if (!rep) {
        memset(&local, 0, sizeof(local));
        rep = &local;
    }
    for (int i = 0; i < mm->ncur; i++) {
        struct patcher_model *m = mm->cur[i];
        if (!m || m->mm != mm)
            continue;
        mm__stream_sync(m->st);
        rep->bytes_copied += mm__stream_take_copied(m->st);
        if (m->passes > rep->passes)
            rep->passes = m->passes;
    }
    mm->ncur = 0;
    rep->measured_ms = clock_mono_sec() * 1e3 - mm->node_t0;
    rep->peak_bytes = dev_bytes_peak(mm->dev);
    rep->measured_pass_ms = rep->passes ? rep->measured_ms / rep->passes : 0;
    log_info("memory plan: %.1f MiB resident, %.1f MiB streamed, activations %.1f MiB, "
             "copied %.1f MiB, peak %.1f of %.1f MiB; per pass predicted %.1f ms, measured "
             "%.1f ms (%d passes, %.1f ms in all)",
             rep->bytes_resident / 1048576.0, rep->bytes_streamed / 1048576.0,
             rep->activation_bytes / 1048576.0, rep->bytes_copied / 1048576.0,
             rep->peak_bytes / 1048576.0, rep->budget / 1048576.0, rep->predicted_ms,
             rep->measured_pass_ms, rep->passes, rep->measured_ms);
    if (mm->n_reports == mm->cap_reports) {
        mm->cap_reports = mm->cap_reports ? 2 * mm->cap_reports : 4;
        mm->reports = xrealloc(mm->reports, (size_t)mm->cap_reports * sizeof(*mm->reports));
    }
    mm->reports[mm->n_reports++] = *rep;
}

int mm_reports_take(struct mm *mm, struct mm_report **out)
{
    int n = mm->n_reports;
    *out = mm->reports;
    mm->reports = NULL;
    mm->n_reports = mm->cap_reports = 0;
    return n;
}
