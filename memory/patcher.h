/*
 * patcher — models as layer lists, their weights, LoRA patches, and weight access.
 *
 * DESIGN
 *
 * A `struct patcher_model` is one network's weights: an ordered list of layers
 * (in execution order: a ResBlock, an attention block, a norm + conv, ...), each
 * holding named weight tensors. It owns the *host copy*: when a weight's source
 * dtype equals its compute dtype, or widens to it exactly (an f16/bf16 file weight of
 * an f32 model: the host copy stays at the file dtype, half the bytes), the source
 * memory is borrowed (typically a read-only mmap of the safetensors file, kept alive
 * with patcher_model_keep); else the model makes exactly one converted copy. The
 * host copy is never modified: patches are applied to device copies only, so there
 * are no backups. Device copies (resident buffers, ring slots, LoRA-patched layers on
 * the cpu device) hold the compute dtype; a narrow host copy is widened into them.
 * On the cpu device clean layers are used in place, so ops get weights at the host
 * dtype and widen them themselves (exactly: f16 and bf16 are subsets of f32).
 *
 * A `struct patcher` is a model plus a patch list (LoRA up/down/alpha with a
 * strength, memory.md §5.1; or another patcher's weight with two strengths, the
 * model-merging nodes' patch). patcher_clone() gives a new patcher sharing the model
 * and copying the patch list; clones differ only in patches (ComfyUI's clones).
 * Both objects are refcounted: a node output cache entry holds a patcher ref.
 *
 * Device state (which layers are resident, the streaming ring) belongs to the model
 * and is managed by the planner (memmgr.h, mm_load_models). At most one patcher's
 * patch set is "baked" into the model's resident device copies at a time; loading a
 * different clone re-uploads exactly the layers whose patches differ.
 *
 * Weight access: between mm_load_models() and the end of the node, model code asks
 * for layer i's weights with patcher_acquire() and gives them back with
 * patcher_release(). For a resident layer this returns tensors over the resident
 * device copy (no work). For a streamed layer it waits for the prefetched upload
 * (the streamer keeps k >= 2 layers in flight on a copy stream), applies the LoRA
 * patches to the device copy, and returns tensors over a ring slot; release()
 * records that compute is done with the slot, so the slot is reused only after.
 * Acquire layers in the order they were added for prefetch to work; other orders
 * are correct but wait for a synchronous upload. Hold at most one streamed layer
 * at a time (resident layers: any number).
 *
 * Threads: everything here runs on the executor thread, except patcher_ref /
 * patcher_unref / patcher_model_ref / patcher_model_unref (atomic, any thread).
 */
#ifndef LATENTD_MEMORY_PATCHER_H
#define LATENTD_MEMORY_PATCHER_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "err.h"
#include "tensor.h"
#include "tensor_precision.h"

struct patcher_model; /* opaque, refcounted */
struct patcher;       /* opaque, refcounted */

/* What a model is; with --lowvram, text encoders load on the CPU (memory.md §7.5). */
enum patcher_role {
    PATCHER_ROLE_OTHER = 0,
    PATCHER_ROLE_UNET,
    PATCHER_ROLE_TEXT_ENCODER,
    PATCHER_ROLE_VAE,
};

/* ---- building a model ----------------------------------------------------------------- */

/* A new empty model with one reference (drop with patcher_model_unref). */
struct patcher_model *patcher_model_new(const char *name, enum patcher_role role);

/*
 * The precision of the model's GEMMs (tensor_precision.h): fp32 unless the loader node
 * sets bf16 from the server's flags (--bf16-unet, --bf16-vae, --bf16-text-enc; see
 * mm_precision). patcher_acquire makes it the calling thread's precision while any
 * layer is held (the last acquired model's wins), and the thread is back at fp32 once
 * every layer is released: so a model's ops run at its precision without the model
 * code knowing, and ops outside any model run at fp32. Executor thread.
 */
void patcher_model_set_precision(struct patcher_model *m, enum tensor_precision p);
enum tensor_precision patcher_precision(const struct patcher *p);
void patcher_model_ref(struct patcher_model *m);
void patcher_model_unref(struct patcher_model *m); /* NULL is a no-op */

/*
 * Append a layer; returns its index (0, 1, ...). `flops` is the layer's compute for
 * one call at a typical shape (0 = unknown; the planner then assumes compute grows
 * with bytes, and measures real times on the first streamed run).
 */
int patcher_model_add_layer(struct patcher_model *m, const char *name, double flops);

/*
 * Append a weight to `layer`; returns its index within the layer (the order
 * patcher_acquire() returns them in), or a negative ERR_* with a message.
 * `src` holds numel(shape) elements of `src_dt`; `dt` is the compute dtype. If
 * src_dt == dt, or src_dt is f16/bf16 and dt f32 (unless patcher_model_set_convert),
 * the memory is borrowed and must stay valid and unchanged until the model is freed
 * (see patcher_model_keep); otherwise the model converts it into its own copy at once.
 * `key` is the checkpoint name ("model.diffusion_model.out.2.weight"), unique in
 * the model, and is what LoRA patches name.
 */
int patcher_model_add_weight(struct patcher_model *m, int layer, const char *key,
                             enum tensor_dtype dt, int ndim, const int64_t *shape,
                             const void *src, enum tensor_dtype src_dt, struct err *e);

/* With on = 1, weights added afterwards are converted to their compute dtype at once
 * (an owned copy) instead of kept at a narrower file dtype: the behaviour before
 * issue 15, for comparisons in tests and benchmarks. Default 0. */
void patcher_model_set_convert(struct patcher_model *m, int on);

/*
 * With on = 1, the borrowed host copies of weights added afterwards lie in a read-only
 * file mapping (util/pages.h's invariant: PROT_READ, never written), as the checkpoint
 * loaders' are. The planner then unmaps their pages from this process while no node
 * runs the model (mm_load_models: models a node does not name; after an upload to a
 * device that keeps its own copy), so the process's RSS holds the weights in use, not
 * every model loaded: the pages stay in the page cache and the next read maps them
 * again (minor faults, no I/O). Never for heap memory: dropping anonymous pages
 * zeroes them. Default 0. Executor thread, before the weights are added.
 */
void patcher_model_set_file_backed(struct patcher_model *m, int on);

/* Unmap the pages of m's file-backed host copies from this process now (see
 * patcher_model_set_file_backed; no-op for other weights). Returns the bytes of the
 * weights concerned. No layer of m may be held. Executor thread. */
size_t patcher_model_drop_pages(struct patcher_model *m);

/* Call release(user) when the model is freed (e.g. munmap of the file that the
 * borrowed weights point into). Any number of keeps; run in reverse order. */
void patcher_model_keep(struct patcher_model *m, void (*release)(void *user), void *user);

/*
 * patcher_model_keep, plus a check of the borrowed memory: check(user, e) returns 0
 * while it still holds the bytes the weights were loaded from, or a negative ERR_*
 * with a message (the mapped model file was rewritten or truncated on disk).
 * patcher_acquire() runs it before handing out any layer, so a node fails at its
 * next layer instead of computing with other bytes; patcher_model_check() runs it
 * on demand (after a model call, to vouch for the last layers).
 */
void patcher_model_keep_checked(struct patcher_model *m, void (*release)(void *user),
                                int (*check)(void *user, struct err *e), void *user);

/* Run the model's checks (see patcher_model_keep_checked): 0, or the first failure
 * with its message prefixed by the model's name. Executor thread. */
int patcher_model_check(const struct patcher_model *m, struct err *e);

const char *patcher_model_name(const struct patcher_model *m);
enum patcher_role patcher_model_role(const struct patcher_model *m);
int patcher_model_layer_count(const struct patcher_model *m);
int patcher_model_weight_count(const struct patcher_model *m, int layer);
size_t patcher_model_layer_bytes(const struct patcher_model *m, int layer); /* storage */
size_t patcher_model_bytes(const struct patcher_model *m);                 /* all layers */
/* Bytes of the host copies of all weights (at their host dtype); *owned (if not NULL)
 * gets the part the model allocated (converted copies), the rest is borrowed. */
size_t patcher_model_host_bytes(const struct patcher_model *m, size_t *owned);

/* Find a weight by key: 0 and (*layer, *index), or ERR_NOT_FOUND. */
int patcher_model_find(const struct patcher_model *m, const char *key, int *layer,
                       int *index);

/* A weight's host copy (read-only; the clean, unpatched weights), for CPU-side use
 * such as the tokenizer-free embedding lookups or tests. Borrowed from the model.
 * *dt is the host copy's dtype, which may be narrower than the compute dtype. */
const void *patcher_model_host_data(const struct patcher_model *m, int layer, int index,
                                    enum tensor_dtype *dt, int *ndim, int64_t shape[4]);

/* The key of weight (layer, index), borrowed from the model; NULL when out of range. */
const char *patcher_model_weight_key(const struct patcher_model *m, int layer, int index);
/* The compute dtype of weight (layer, index): what a baked (patched) device copy holds. */
enum tensor_dtype patcher_model_weight_dtype(const struct patcher_model *m, int layer, int index);

/* ---- patchers (model + patches) --------------------------------------------------------- */

/* A patcher over `m` with no patches (takes a reference on m). Drop with patcher_unref. */
struct patcher *patcher_new(struct patcher_model *m);
/* A new patcher sharing p's model, with a copy of p's patch list. */
struct patcher *patcher_clone(const struct patcher *p);
void patcher_ref(struct patcher *p);
void patcher_unref(struct patcher *p); /* NULL is a no-op */

struct patcher_model *patcher_model_of(const struct patcher *p); /* borrowed */

/*
 * Add a LoRA patch to weight `key` (memory.md §5.1):
 *     W += strength * (alpha / rank) * reshape(up @ down, W.shape)
 * up is [out, rank] (a conv's [out, rank, 1, 1] flattened), down is [rank, in] where
 * out = W.shape[0] and in = numel(W) / out (a conv's [rank, in, kh, kw] flattened).
 * has_alpha == 0 means scale 1. The factors are copied (converted to f32); patches
 * on one key apply in the order added. Returns 0, ERR_NOT_FOUND for an unknown key
 * (the caller logs "lora key not loaded" as ComfyUI does), ERR_INVALID for shapes
 * that do not match W. Strength 0 is allowed and leaves outputs unchanged.
 */
int patcher_add_lora(struct patcher *p, const char *key, const void *up, const void *down,
                     enum tensor_dtype factor_dt, int64_t rank, float alpha, int has_alpha,
                     float strength, struct err *e);

/*
 * Add a model patch to weight `key` (ComfyUI's add_patches with another model's weight,
 * as the model-merging nodes use it):
 *     W = strength_model * W + strength_patch * W2
 * where W2 is weight `src_key` of `src` with src's own patches applied, in f32. Nothing
 * is copied now: src's host copy is read when a layer is baked (src need not be loaded,
 * and stays alive: the patch holds a reference on src). Patches on one key apply in the
 * order added, each scaling what the earlier ones left (as calculate_weight does).
 * Returns 0, ERR_NOT_FOUND when p's model has no `key` or src's no `src_key`, or
 * ERR_INVALID when the two shapes differ or a strength is not finite.
 */
int patcher_add_model_patch(struct patcher *p, const char *key, struct patcher *src,
                            const char *src_key, float strength_patch, float strength_model,
                            struct err *e);

int patcher_patch_count(const struct patcher *p); /* patch entries */

/* Device scratch bytes that applying p's patches to one weight needs (the planner
 * reserves it beside the activations); 0 without patches. */
size_t patcher_patch_workspace_bytes(const struct patcher *p);

/* ---- weight access (between mm_load_models and the end of the node) ---------------------- */

/*
 * Layer `layer`'s weights on the compute device, patched, in the order they were
 * added: (*w)[j] for j < patcher_model_weight_count(). The tensors are borrowed and
 * valid until patcher_release(p, layer). Errors: ERR_INVALID when the model is not
 * loaded (call mm_load_models first) or the layer is out of range; ERR_DEVICE_OOM
 * only if the patch workspace cannot be had (the plan reserves it).
 */
int patcher_acquire(struct patcher *p, int layer, struct tensor *const **w, struct err *e);
void patcher_release(struct patcher *p, int layer);

/* The device the model computes on now (NULL while not loaded). Borrowed. */
struct dev *patcher_device(const struct patcher *p);

#endif
