/*
 * memmgr — the memory manager: VRAM state and flags, the loaded-model list, and the
 * load planner (ComfyUI's load_models_gpu, memory.md §1, §3, §10).
 *
 * DESIGN
 *
 * One `struct mm` per compute device, owned by the executor thread. It opens the
 * device from the config (mm_new), chooses the VRAM state from the flags as ComfyUI
 * does (§1.2, no automatic thresholds), and keeps the list of models that hold
 * device memory.
 *
 * Before a node runs a model it calls mm_load_models() with the models it needs and
 * its exact memory plan for the actual shapes (activation peak + workspace bytes,
 * computed from the layer list). The planner then
 *   1. frees models the node does not need, cheapest reload first (resident bytes /
 *      copy bandwidth), keeping models marked as used later in the prompt for last,
 *      and only partly when part is enough (a partial unload streams a model's tail);
 *   2. loads fully what fits;
 *   3. otherwise picks a resident set per model with a cost model (per-layer copy time
 *      from the bandwidth measured at start vs compute time, measured on earlier runs
 *      or estimated from FLOPs) and streams the rest through a ring of k+1 slots
 *      (k >= 2 layers prefetched while one computes, fewer only when the budget leaves
 *      no room for more).
 * The plan never puts device bytes above the budget: resident weights + ring + patch
 * workspace + activation peak + workspace <= budget - reserve. If an allocation fails
 * anyway (another process took memory), it shrinks the plan and retries once, then
 * fails with ERR_DEVICE_OOM and a message; nothing is left half-loaded.
 *
 * Every call fills a `struct mm_report` (plan and outcome: resident/streamed MiB,
 * activation peak, bytes copied, predicted and measured time), logged at info level
 * by mm_node_end() and kept for mm_reports_take(); graph/ renders it as JSON for /history.
 *
 * Threads: executor thread only, except mm_stats() (any thread: reads atomics).
 */
#ifndef LATENTD_MEMORY_MEMMGR_H
#define LATENTD_MEMORY_MEMMGR_H

#include <stddef.h>

#include "device.h"
#include "err.h"
#include "patcher.h"

/* memory.md §1.1. */
enum mm_vram_state {
    MM_VRAM_DISABLED = 0, /* --cpu or no GPU: everything on the CPU, nothing moves */
    MM_VRAM_NO_VRAM,      /* --novram: stream every layer */
    MM_VRAM_LOW_VRAM,     /* --lowvram: as normal, text encoders on the CPU */
    MM_VRAM_NORMAL_VRAM,  /* default: full load if it fits, else partial */
    MM_VRAM_HIGH_VRAM,    /* --highvram / --gpu-only: always full loads */
    MM_VRAM_SHARED,       /* unified memory (never chosen automatically here) */
};

const char *mm_vram_state_name(enum mm_vram_state s); /* "NORMAL_VRAM", ... */

/*
 * The flags of this subsystem (memory.md §8). The server fills one from argv as it
 * parses (server/srv_config.c) and hands it down through graph_new untouched; tests
 * and benchmarks fill their own. Strings are borrowed for the call to mm_new.
 */
struct mm_config {
    const char *device_spec;  /* "auto" (default), "cpu" (--cpu), "cuda:N", "sim:SIZE" */
    /* The state the flags ask for: NORMAL_VRAM (default, --normalvram), LOW_VRAM,
     * NO_VRAM or HIGH_VRAM (--highvram, --gpu-only). A cpu device always runs
     * DISABLED, whatever is asked; SHARED is never asked for. */
    enum mm_vram_state vram_state;
    size_t vram_budget;       /* --vram-budget: hard cap, bytes; 0 = none */
    size_t reserve_vram;      /* --reserve-vram, bytes; used only when reserve_set */
    int reserve_set;          /* the flag was given (default: 400 MiB on CUDA, 0 on sim) */
    int disable_smart_memory; /* unload everything else before each load, all at prompt end */
    int async_offload;        /* max prefetch depth k (copy streams): the planner picks
                               * k in 2..max from the budget; -1 default (4), 0 = sync */
    int disable_pinned_memory;
    /* 1: never unmap the file pages of idle models' weights (mm_pages.c); for A/B runs.
     * LATENTD_WEIGHT_PAGES=keep in the environment and vram_state HIGH_VRAM (--highvram,
     * --gpu-only: keep models loaded) set it too. Default 0. */
    int keep_weight_pages;
    /* GEMM precision per enum patcher_role (UNET, TEXT_ENCODER, VAE), from --bf16-unet,
     * --bf16-text-enc, --bf16-vae after ComfyUI's precedence (server/srv_config.c);
     * all TENSOR_PRECISION_F32 by default. Loader nodes read it with mm_precision. */
    enum tensor_precision precision[4];
};

/* Defaults: auto device, NORMAL_VRAM asked, async_offload -1. */
void mm_config_init(struct mm_config *c);

struct mm; /* opaque */

/* Open the device and choose the state; logs both. Caller frees with mm_free. */
int mm_new(const struct mm_config *cfg, struct mm **out, struct err *e);
/* Unloads every model first (their patchers stay valid, merely unloaded). */
void mm_free(struct mm *mm);

struct dev *mm_device(struct mm *mm);            /* the compute device, borrowed */
enum mm_vram_state mm_state(const struct mm *mm);
/* The precision the flags ask for a model of `role` (fp32 when mm is NULL or the role
 * has none); loader nodes pass it to patcher_model_set_precision. Any thread. */
enum tensor_precision mm_precision(const struct mm *mm, enum patcher_role role);

/* ---- planning ------------------------------------------------------------------------- */

#define MM_MAX_MODELS 8

struct mm_request {
    struct patcher *models[MM_MAX_MODELS]; /* borrowed; needed by this node */
    int n_models;
    size_t activation_bytes; /* exact activation peak for the node's shapes */
    size_t workspace_bytes;  /* op workspace (attention scratch, cuBLAS, ...) */
    int force_full_load;     /* load everything or fail (ComfyUI force_full_load) */
    /* Models needed later in this prompt or queue: evicted last (Belady's rule). */
    struct patcher *later[MM_MAX_MODELS];
    int n_later;
};

/*
 * Bytes per side (issue 13). Device bytes are what uploads produce: each weight at its
 * compute dtype (f32 for an f16 file in the default fp32 compute), except on the cpu
 * device, where clean layers are used in place: there "resident" is the host copy at
 * its own dtype. Host bytes are the host copies as kept: a borrowed file's dtype (an
 * f16 file stays f16), or the converted copy. The pack is the streamer's second host
 * copy of the streamed layers, laid out as on the device (so one layer is one copy).
 */
struct mm_model_plan {
    char name[64];
    int layers, layers_resident, layers_streamed;
    size_t bytes_resident;     /* device bytes of resident layers (cpu: host bytes used in place) */
    size_t bytes_streamed;     /* device bytes of streamed layers (copied once per use) */
    size_t bytes_host;         /* host copies of all weights, at their host dtype */
    size_t bytes_pack;         /* host staging of streamed layers (device layout); 0 if none */
    int ring_slots;            /* streaming ring slots (0: full load) */
    size_t ring_bytes;
    int prefetch;              /* layers in flight ahead of compute */
};

/* One node's plan and outcome. Sizes in bytes, times in ms. */
struct mm_report {
    char device[64];
    size_t budget;             /* bytes the plan had to fit in (budget - reserve) */
    size_t activation_bytes, workspace_bytes, patch_workspace_bytes;
    size_t bytes_unloaded;     /* freed from other models */
    int models_unloaded;       /* fully unloaded */
    int n_models;
    struct mm_model_plan models[MM_MAX_MODELS];
    size_t bytes_resident, bytes_streamed; /* sums over models */
    size_t bytes_host, bytes_pack;         /* sums over models (see mm_model_plan) */
    size_t bytes_loaded;       /* copied host->device while loading */
    size_t bytes_copied;       /* copied host->device by streaming during the node */
    size_t peak_bytes;         /* device peak during the node (set by mm_node_end) */
    double predicted_ms;       /* one pass over every layer, from the cost model */
    double load_ms, measured_ms; /* loading; node run (load end to mm_node_end) */
    int passes;                /* forward passes seen (acquires of layer 0), e.g. steps */
    double measured_pass_ms;   /* measured_ms / passes: compare with predicted_ms */
    int retried;               /* an allocation failed and the plan shrank once */
};

/*
 * Make `req`'s models usable on the device (see DESIGN). Fills *rep (may be NULL).
 * Returns 0, ERR_DEVICE_OOM when even a minimal plan (everything streamed, the
 * smallest ring) does not fit beside the activation peak, or another ERR_* code;
 * `e` says which model and how many bytes were missing.
 */
int mm_load_models(struct mm *mm, const struct mm_request *req, struct mm_report *rep,
                   struct err *e);

/* The node that called mm_load_models is done: waits for in-flight copies, fills
 * rep->measured_ms, bytes_copied, peak_bytes, logs the report at info level. */
void mm_node_end(struct mm *mm, struct mm_report *rep);

/* The reports of every mm_node_end since the last call, oldest first: returns how many
 * and transfers the array to *out (caller xfrees; NULL when there were none). The
 * executor takes them after each node, so that a job's history shows each
 * model-running node's plan and outcome. */
int mm_reports_take(struct mm *mm, struct mm_report **out);

/* ---- unloading and housekeeping ----------------------------------------------------------- */

/* Unload one model's device copies (all of them). Safe if it is not loaded. */
void mm_unload(struct mm *mm, struct patcher_model *m);
/* Unload every model (POST /free {"unload_models": true}). */
void mm_unload_all(struct mm *mm);
/* End of a prompt: with --disable-smart-memory, unloads everything. */
void mm_prompt_end(struct mm *mm);

int mm_loaded_count(const struct mm *mm);
/* Device bytes a model holds now (resident layers, ring, patch workspace); 0 if none. */
size_t mm_model_loaded_bytes(const struct mm *mm, const struct patcher_model *m);

/* Figures for /system_stats (bytes): device total and free as our allocator sees them
 * (budget-capped), and what loaded models hold. Any thread. */
struct mm_stats {
    size_t vram_total, vram_free, models_bytes;
    int models_loaded;
};
void mm_stats(struct mm *mm, struct mm_stats *out);

/* Copy bandwidth (bytes/s) measured at mm_new, used by the cost model. */
double mm_copy_bandwidth(const struct mm *mm);

#endif
