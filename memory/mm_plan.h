/*
 * mm_plan — the manager's private state, shared by mm.c and mm_plan.c only.
 * Threads: executor only, except the atomics read by mm_stats().
 */
#ifndef LATENTD_MEMORY_MM_PLAN_H
#define LATENTD_MEMORY_MM_PLAN_H

#include "buf.h"
#include "mm_internal.h"

struct mm {
    struct mm_config cfg;       /* copy; strings borrowed */
    struct dev *dev;            /* owned: the compute device */
    struct dev *cpu;            /* owned, lazily opened: text encoders under --lowvram */
    enum mm_vram_state state;
    size_t reserve;             /* bytes kept free on the device */
    int prefetch;               /* k: layers uploaded ahead; 0 = synchronous */
    int use_pinned;
    double bw;                  /* host->device bytes/s, measured at mm_new */
    double lat_ms;              /* per-copy latency assumed by the cost model */
    double flops_rate;          /* FLOP/s assumed when only a FLOP hint is known */
    struct patcher_model **loaded; /* borrowed (no refs): models holding device memory */
    int nloaded, caploaded;
    uint64_t tick;
    /* The node in progress (between mm_load_models and mm_node_end). */
    struct patcher_model *cur[MM_MAX_MODELS]; /* borrowed; NULLed if unloaded */
    int ncur;
    double node_t0;             /* ms, end of loading */
    struct mm_report *reports;  /* owned: from mm_node_end, not yet taken */
    int n_reports, cap_reports;
    atomic_size_t stat_models_bytes;
    atomic_int stat_models_loaded;
};

struct dev *mm__cpu_device(struct mm *mm);
size_t mm__model_device_bytes(const struct patcher_model *m);
void mm__track(struct mm *mm, struct patcher_model *m);
void mm__layer_evict(struct patcher_model *m, struct pm_layer *L);
void mm__publish(struct mm *mm);

#endif
