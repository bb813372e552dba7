/*
 * mm.c — the memory manager object: flags and VRAM state (memory.md §1, §8), the
 * device, the loaded-model list, unloading (whole or partial), and figures for
 * /system_stats. The planner itself is mm_plan.c.
 *
 * The loaded list holds no references: a model whose last owner drops it unloads
 * itself (patcher_model_unref -> mm__unload_model), the C version of ComfyUI's
 * weakref + finalizer, without the "potential memory leak" hunt (§3.2).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "mm_plan.h"

const char *mm_vram_state_name(enum mm_vram_state s)
{
    switch (s) {
    case MM_VRAM_DISABLED: return "DISABLED";
    case MM_VRAM_NO_VRAM: return "NO_VRAM";
    case MM_VRAM_LOW_VRAM: return "LOW_VRAM";
    case MM_VRAM_NORMAL_VRAM: return "NORMAL_VRAM";
    case MM_VRAM_HIGH_VRAM: return "HIGH_VRAM";
    case MM_VRAM_SHARED: return "SHARED";
    }
    return "?";
}

void mm_config_init(struct mm_config *c)
{
    memset(c, 0, sizeof(*c));
    c->device_spec = "auto";
    c->vram_state = MM_VRAM_NORMAL_VRAM;
    c->async_offload = -1;
}

/* memory.md §1.2: flags pick the state; no automatic size thresholds. */
static enum mm_vram_state choose_state(const struct mm_config *c, const struct dev *d)
{
    return dev_kind(d) == DEV_KIND_CPU ? MM_VRAM_DISABLED : c->vram_state;
}

/* Host->device bandwidth with the copy path the streamer uses (pinned, async). */
static double measure_bandwidth(struct dev *d)
{
    size_t n = 16u << 20, fr = 0, tot = 0;
    if (dev_mem_info(d, &fr, &tot) == 0 && fr / 4 < n)
        n = fr / 4;
    if (n < (64u << 10))
        return 8e9;
    void *h = NULL, *dv = NULL;
    struct dev_stream *s = NULL;
    struct dev_event *ev = NULL;
    double bw = 8e9;
    int pinned;
    if (dev_host_alloc(d, n, &h, &pinned) < 0)
        return bw;
    memset(h, 1, n);
    if (dev_alloc(d, n, &dv) < 0 || dev_stream_new(d, &s) < 0 || dev_event_new(d, &ev) < 0)
        goto out;
    dev_copy_async(d, s, DEV_COPY_H2D, dv, h, n); /* warm-up */
    dev_stream_sync(s);
    double t0 = clock_mono_sec() * 1e3;
    for (int i = 0; i < 3; i++)
        dev_copy_async(d, s, DEV_COPY_H2D, dv, h, n);
    dev_event_record(ev, s);
    dev_event_sync(ev);
    double ms = clock_mono_sec() * 1e3 - t0;
    if (ms > 0)
        bw = 3.0 * (double)n / (ms / 1e3);
out:
    dev_event_free(ev);
    dev_stream_free(s);
    dev_free(d, dv);
    dev_host_free(d, h);
    return bw;
}

enum tensor_precision mm_precision(const struct mm *mm, enum patcher_role role)
{
    if (!mm || role < 0 || role >= (int)(sizeof(mm->cfg.precision) / sizeof(mm->cfg.precision[0])))
        return TENSOR_PRECISION_F32;
    return mm->cfg.precision[role];
}

int mm_new(const struct mm_config *cfg, struct mm **out, struct err *e)
{
    *out = NULL;
    struct mm_config def;
    if (!cfg) {
        mm_config_init(&def);
        cfg = &def;
    }
    struct mm *mm = xcalloc(1, sizeof(*mm));
    mm->cfg = *cfg;
    const char *wp = getenv("LATENTD_WEIGHT_PAGES");
    /* --highvram / --gpu-only: ComfyUI keeps models loaded after use; on the cpu device
     * that is their mapped pages (a later prompt pays no re-mapping, mm_pages.c). */
    if ((wp && !strcmp(wp, "keep")) || cfg->vram_state == MM_VRAM_HIGH_VRAM)
        mm->cfg.keep_weight_pages = 1;
    const char *spec = cfg->device_spec && *cfg->device_spec ? cfg->device_spec : "auto";
    int rc = dev_open(spec, cfg->vram_budget, &mm->dev, e);
    if (rc < 0) {
        xfree(mm);
        return rc;
    }
    mm->state = choose_state(cfg, mm->dev);
    /* ComfyUI keeps 400 MiB free on Linux GPUs for the driver, cuBLAS and other
     * processes (§2.3). Our accounting is exact, so the simulated device needs none. */
    if (cfg->reserve_set)
        mm->reserve = cfg->reserve_vram;
    else
        mm->reserve = dev_kind(mm->dev) == DEV_KIND_CUDA ? (size_t)400 << 20 : 0;
    /* The deepest ring the planner may choose; it picks 2..this from the budget. */
    mm->prefetch = cfg->async_offload < 0 ? 4 : cfg->async_offload > 8 ? 8 : cfg->async_offload;
    mm->use_pinned = !cfg->disable_pinned_memory;
    mm->lat_ms = dev_kind(mm->dev) == DEV_KIND_CUDA ? 0.01 : 0.005;
    mm->flops_rate = dev_kind(mm->dev) == DEV_KIND_CUDA ? 5e13 : 3e10;
    mm->bw = dev_kind(mm->dev) == DEV_KIND_CPU ? 1e12 : measure_bandwidth(mm->dev);
    dev_peak_reset(mm->dev);
    size_t fr = 0, tot = 0;
    dev_mem_info(mm->dev, &fr, &tot);
    log_info("Set vram state to: %s", mm_vram_state_name(mm->state));
    if (cfg->precision[PATCHER_ROLE_UNET] || cfg->precision[PATCHER_ROLE_VAE] ||
        cfg->precision[PATCHER_ROLE_TEXT_ENCODER])
        log_info("compute precision: unet %s, vae %s, text encoder %s; bf16 GEMM: %s",
                 tensor_precision_name(cfg->precision[PATCHER_ROLE_UNET]),
                 tensor_precision_name(cfg->precision[PATCHER_ROLE_VAE]),
                 tensor_precision_name(cfg->precision[PATCHER_ROLE_TEXT_ENCODER]),
                 tensor_bf16_path());
    log_info("Device: %s, total %zu MiB, reserve %zu MiB, copy %.1f GB/s, prefetch up to %d%s",
             dev_name(mm->dev), tot >> 20, mm->reserve >> 20, mm->bw / 1e9, mm->prefetch,
             mm->use_pinned ? "" : ", pinned memory disabled");
    *out = mm;
    return 0;
}

void mm_free(struct mm *mm)
{
    if (!mm)
        return;
    mm_unload_all(mm);
    xfree(mm->loaded);
    xfree(mm->reports);
    dev_close(mm->cpu);
    dev_close(mm->dev);
    xfree(mm);
}

struct dev *mm_device(struct mm *mm) { return mm->dev; }
enum mm_vram_state mm_state(const struct mm *mm) { return mm->state; }
double mm_copy_bandwidth(const struct mm *mm) { return mm->bw; }
int mm_loaded_count(const struct mm *mm) { return mm->nloaded; }

struct dev *mm__cpu_device(struct mm *mm)
{
    if (dev_kind(mm->dev) == DEV_KIND_CPU)
        return mm->dev;
    if (!mm->cpu && dev_open("cpu", 0, &mm->cpu, NULL) < 0)
        PANIC("cannot open the cpu device");
    return mm->cpu;
}

size_t mm__model_device_bytes(const struct patcher_model *m)
{
    return m->resident_bytes + mm__stream_device_bytes(m->st);
}

size_t mm_model_loaded_bytes(const struct mm *mm, const struct patcher_model *m)
{
    return m->mm == mm ? mm__model_device_bytes(m) : 0;
}

void mm__track(struct mm *mm, struct patcher_model *m)
{
    for (int i = 0; i < mm->nloaded; i++)
        if (mm->loaded[i] == m)
            return;
    if (mm->nloaded == mm->caploaded) {
        mm->caploaded = mm->caploaded ? mm->caploaded * 2 : 8;
        mm->loaded = xrealloc(mm->loaded, (size_t)mm->caploaded * sizeof(*mm->loaded));
    }
    mm->loaded[mm->nloaded++] = m;
    m->mm = mm;
}

void mm__forget(struct mm *mm, struct patcher_model *m)
{
    for (int i = 0; i < mm->nloaded; i++)
        if (mm->loaded[i] == m) {
            memmove(&mm->loaded[i], &mm->loaded[i + 1],
                    (size_t)(mm->nloaded - i - 1) * sizeof(*mm->loaded));
            mm->nloaded--;
            break;
        }
    for (int i = 0; i < mm->ncur; i++)
        if (mm->cur[i] == m)
            mm->cur[i] = NULL;
}

/* Free one resident layer's device copy (the layer becomes host-only). */
void mm__layer_evict(struct patcher_model *m, struct pm_layer *L)
{
    if (L->dev_buf) {
        dev_free(m->dev, L->dev_buf);
        m->resident_bytes -= L->bytes;
        L->dev_buf = NULL;
    }
    L->resident = 0;
    L->dev_sig = 0;
}

void mm__unload_model(struct patcher_model *m)
{
    if (!m->mm)
        return;
    /* Kernels queued by the last node may still read these buffers (CUDA). */
    dev_stream_sync(dev_compute_stream(m->dev));
    for (int i = 0; i < m->nlayers; i++) {
        struct pm_layer *L = &m->layers[i];
        if (L->holds > 0) {
            /* A model unloaded mid-use is a caller bug; drop the views rather than
             * leave them pointing at freed memory. */
            log_warn("model '%s': layer '%s' unloaded while held", m->name, L->name);
            for (int j = 0; j < L->nw; j++)
                tensor_free(L->views[j]);
            xfree(L->views);
            L->views = NULL;
            L->holds = 0;
            L->slot = -1;
        }
    }
    mm__stream_free(m, m->st);
    m->st = NULL;
    for (int i = 0; i < m->nlayers; i++)
        mm__layer_evict(m, &m->layers[i]);
    ASSERT(m->resident_bytes == 0);
    struct mm *mm = m->mm;
    if (m->pages_live && !mm->cfg.keep_weight_pages)
        patcher_model_drop_pages(m); /* nothing of this manager reads them now */
    mm__forget(mm, m);
    mm__publish(mm);
    m->mm = NULL;
    m->dev = NULL;
    m->zero_copy = 0;
}

void mm_unload(struct mm *mm, struct patcher_model *m)
{
    if (m && m->mm == mm)
        mm__unload_model(m);
}

void mm_unload_all(struct mm *mm)
{
    while (mm->nloaded > 0)
        mm__unload_model(mm->loaded[mm->nloaded - 1]);
    /* Give the cpu device's cached free blocks back too (POST /free). */
    dev_trim(mm->dev);
    dev_trim(mm->cpu);
}

void mm_prompt_end(struct mm *mm)
{
    /* Between prompts the cpu device's cache keeps only its limit (device.h). */
    dev_settle_cache(mm->dev);
    dev_settle_cache(mm->cpu);
    if (mm->cfg.disable_smart_memory && mm->nloaded) {
        log_info("unloading %d model(s) (--disable-smart-memory)", mm->nloaded);
        mm_unload_all(mm);
    }
}

/* Snapshot for mm_stats(), which HTTP threads call while the executor works. */
void mm__publish(struct mm *mm)
{
    size_t n = 0;
    for (int i = 0; i < mm->nloaded; i++)
        n += mm__model_device_bytes(mm->loaded[i]);
    atomic_store(&mm->stat_models_bytes, n);
    atomic_store(&mm->stat_models_loaded, mm->nloaded);
}

void mm_stats(struct mm *mm, struct mm_stats *out)
{
    memset(out, 0, sizeof(*out));
    dev_mem_info(mm->dev, &out->vram_free, &out->vram_total);
    out->models_bytes = atomic_load(&mm->stat_models_bytes);
    out->models_loaded = atomic_load(&mm->stat_models_loaded);
}
