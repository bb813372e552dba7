/*
 * mm_internal — structures shared by the policy part of memory/ (patcher*.c, mm*.c).
 * Not a public header: models/ and above use patcher.h and memmgr.h only.
 *
 * Device layout of a layer: its weights packed back to back, each at a 256-byte
 * aligned offset (pm_weight.off), `pm_layer.bytes` in all, every weight at its
 * compute dtype (pm_weight.dt). The same layout is used for a resident layer's
 * device buffer, for a ring slot, and for the streamed layers' pinned host pack, so
 * one layer is always one transfer.
 *
 * The host copy may be narrower than the layout (issue 15): an f16/bf16 file weight
 * of an f32 model stays at its file dtype (pm_weight.host_dt), borrowed from the
 * mapping, and is widened (exactly) wherever bytes go into the layout (pack fill,
 * upload: pm__copy_weight) or, on the cpu device's zero-copy path, inside the op
 * that reads it.
 *
 * Threads: executor only.
 */
#ifndef LATENTD_MEMORY_MM_INTERNAL_H
#define LATENTD_MEMORY_MM_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "memmgr.h"
#include "patcher.h"

#define MM_ALIGN 256

struct pm_weight {
    char *key;             /* owned */
    enum tensor_dtype dt;  /* compute dtype: device copies and views of them hold it */
    enum tensor_dtype host_dt; /* the host copy's dtype (dt, or the narrower file dtype) */
    int ndim;
    int64_t shape[4];
    size_t bytes;          /* bytes at dt (its size in the packed layout) */
    size_t host_bytes;     /* bytes of the host copy, at host_dt */
    size_t off;            /* offset inside the layer's packed layout */
    const void *host;      /* clean host copy: borrowed (src) or == owned */
    void *owned;           /* owned converted copy, or NULL */
    int file_pages;        /* host is borrowed from a read-only file mapping: its pages
                            * may be dropped from this process (mm_pages.c) */
};

struct pm_layer {
    char *name;            /* owned */
    double flops;          /* hint, 0 unknown */
    double comp_ms;        /* measured compute time (EMA), < 0 unknown */
    struct pm_weight *w;   /* owned array */
    int nw, capw;
    size_t bytes;          /* packed size (aligned offsets) */

    /* Device state (valid while the model is loaded). */
    void *dev_buf;         /* owned device buffer when resident (not zero-copy) */
    int resident;          /* 1: weights live on the device (or zero-copy on cpu) */
    uint64_t dev_sig;      /* patch signature baked into dev_buf (0 clean) */
    size_t pack_off;       /* offset in the stream pack when streamed, else SIZE_MAX */
    struct tensor **views; /* owned while held: one per weight */
    int holds;
    int slot;              /* ring slot while held (streamed), else -1 */
    double t_acquired;     /* ms clock at acquire (compute time measurement) */
};

struct pm_keep {
    void (*release)(void *user);
    int (*check)(void *user, struct err *e); /* NULL: nothing to check */
    void *user;
};

struct mm_stream; /* mm_stream.c */

struct patcher_model {
    atomic_int refs;
    char *name;            /* owned */
    enum patcher_role role;
    enum tensor_precision prec; /* GEMM precision while its layers are held */
    struct pm_layer *layers; /* owned array */
    int nlayers, caplayers;
    struct pm_keep *keeps; /* owned array */
    int nkeeps;
    int convert;           /* 1: every weight converted to its dt at add (no narrow host) */
    int file_backed;       /* borrowed weights added now lie in a file mapping */
    int pages_live;        /* file pages may be mapped now (read since the last drop) */
    int32_t *index;        /* owned: open-addressing key -> (layer << 16 | weight) + 1 */
    size_t index_cap;      /* slots (power of two), 0 while not built */

    /* Device state: managed by mm_plan.c / mm.c. */
    struct mm *mm;         /* borrowed: the manager it is loaded on, NULL if none */
    struct dev *dev;       /* borrowed: where it computes while loaded */
    int zero_copy;         /* cpu device: clean layers use the host copy directly */
    struct mm_stream *st;  /* owned: streaming state, NULL on full load */
    size_t resident_bytes; /* device bytes of resident layer buffers */
    uint64_t last_use;     /* mm tick of the last mm_load_models naming it */
    int passes;            /* acquires of layer 0 since the last load */
};

/*
 * A patch's payload: LoRA factors, or (src != NULL) a model patch: another patcher's
 * weight, the merge nodes' "model_as_lora"-style diff (patcher_add_model_patch).
 */
struct pm_lora {
    atomic_int refs;
    int64_t out, in, rank;
    float scale;           /* alpha / rank, or 1 */
    float *up;             /* owned [out, rank] f32 */
    float *down;           /* owned [rank, in] f32 */
    uint64_t id;           /* unique, for patch signatures */
    struct patcher *src;   /* model patch: one reference, else NULL */
    int src_layer, src_index; /* model patch: the weight of src */
    size_t ws;             /* model patch: device scratch bytes to bake it (with src's) */
};

struct pm_patch {
    int layer, index;      /* the weight */
    struct pm_lora *lora;  /* one reference */
    float strength;        /* ComfyUI's strength_patch */
    float strength_model;  /* W *= strength_model first (1 for LoRAs) */
};

/* A patch that leaves the weight as it is (skipped everywhere, so that the bytes equal
 * the unpatched ones). */
static inline int pm__patch_is_noop(const struct pm_patch *pp)
{
    return pp->strength == 0.0f && pp->strength_model == 1.0f;
}

struct patcher {
    atomic_int refs;
    struct patcher_model *model; /* one reference */
    struct pm_patch *patches;    /* owned array */
    int npatches, cappatches;
    uint64_t *sig;               /* owned: per-layer patch signature (0 = none) */
};

/* Streaming (mm_stream.c). */
int mm__stream_new(struct patcher_model *m, int slots, int prefetch, int use_pinned,
                   struct mm_stream **out, struct err *e);
void mm__stream_free(struct patcher_model *m, struct mm_stream *st);
size_t mm__stream_device_bytes(const struct mm_stream *st);
size_t mm__stream_slot_bytes(const struct mm_stream *st);
size_t mm__stream_pack_bytes(const struct mm_stream *st); /* host pack; 0 when direct */
int mm__stream_slots(const struct mm_stream *st);
int mm__stream_prefetch(const struct mm_stream *st);
void mm__stream_sync(struct mm_stream *st);           /* wait for in-flight copies */
size_t mm__stream_take_copied(struct mm_stream *st);  /* bytes copied since last call */
int mm__stream_acquire(struct patcher_model *m, struct mm_stream *st, int layer,
                       void **data, struct err *e);
void mm__stream_release(struct patcher_model *m, struct mm_stream *st, int layer);
uint64_t *mm__stream_slot_sig(struct mm_stream *st, int slot);
int mm__stream_slot_of(struct mm_stream *st, int layer);

/* Patching (patcher_access.c). */
uint64_t pm__layer_sig(struct patcher *p, int layer);
int pm__apply_patches(struct patcher *p, int layer, void *buf, struct dev *d, struct err *e);
size_t pm__patch_workspace(const struct patcher *p);
size_t pm__patch_bytes(const struct pm_patch *pp); /* device scratch to apply one */
int pm__bake_resident(struct patcher *p, int layer, struct err *e);
int pm__upload_layer(struct dev *d, const struct pm_layer *L, void *dst);
/* Weight w's clean bytes at its dt into dst (device memory of d), widening a narrow
 * host copy on the way; synchronous. */
int pm__copy_weight(struct dev *d, const struct pm_weight *w, void *dst);
/* The same into host memory (the stream pack, a host device's buffer). */
void pm__weight_to_host(const struct pm_weight *w, void *dst);

/* Weight pages (mm_pages.c). keep[layer] != 0 keeps that layer's pages (NULL: drop
 * all); returns the bytes of the weights whose pages were dropped. */
size_t pm__drop_pages(struct patcher_model *m, const unsigned char *keep);
void mm__drop_idle_pages(struct mm *mm, const struct mm_request *req);

/* Manager hooks (mm.c). */
void mm__forget(struct mm *mm, struct patcher_model *m);
void mm__unload_model(struct patcher_model *m);

#endif
