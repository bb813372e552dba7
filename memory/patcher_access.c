/*
 * patcher_access.c — weight access (patcher_acquire / patcher_release) and baking
 * LoRA patches into device copies.
 *
 * A device copy of a layer (resident buffer or ring slot) carries the signature of
 * the patches baked into it. Acquire compares it with the acquiring patcher's: equal
 * means no work (full-load mode is free); different means upload the clean bytes
 * from the host copy again and apply this patcher's patches. The host copy is never
 * patched, so there is nothing to back up or restore.
 */
#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "mm_internal.h"

#define PM_STAGE_ELEMS ((size_t)1 << 20) /* staging for widening into device memory */

void pm__weight_to_host(const struct pm_weight *w, void *dst)
{
    if (w->host_dt == w->dt)
        memcpy(dst, w->host, w->bytes);
    else
        tensor_convert_host(dst, w->dt, w->host, w->host_dt, w->bytes / tensor_dtype_size(w->dt));
}

int pm__copy_weight(struct dev *d, const struct pm_weight *w, void *dst)
{
    /* A device copy is rewritten in place (another clone's patches baked, a ring slot
     * reused for another layer): a bf16 copy made from its old bytes must go. */
    if (dev_is_host(d))
        tensor_bf16_cache_invalidate(dst, w->bytes);
    if (w->host_dt == w->dt)
        return dev_copy(d, DEV_COPY_H2D, dst, w->host, w->bytes);
    if (dev_is_host(d)) {
        pm__weight_to_host(w, dst);
        return 0;
    }
    /* A device we cannot write directly: widen through a bounded staging buffer, so a
     * 59 MB conv weight does not need a 118 MB temporary. */
    size_t es = tensor_dtype_size(w->dt), hs = tensor_dtype_size(w->host_dt);
    size_t n = w->bytes / es, chunk = n < PM_STAGE_ELEMS ? n : PM_STAGE_ELEMS;
    void *stage = xmalloc(chunk * es);
    int rc = 0;
    for (size_t i = 0; i < n && rc >= 0; i += chunk) {
        size_t c = n - i < chunk ? n - i : chunk;
        tensor_convert_host(stage, w->dt, (const char *)w->host + i * hs, w->host_dt, c);
        rc = dev_copy(d, DEV_COPY_H2D, (char *)dst + i * es, stage, c * es);
    }
    xfree(stage);
    return rc;
}

int pm__upload_layer(struct dev *d, const struct pm_layer *L, void *dst)
{
    for (int j = 0; j < L->nw; j++) {
        const struct pm_weight *w = &L->w[j];
        int rc = pm__copy_weight(d, w, (char *)dst + w->off);
        if (rc < 0)
            return rc;
    }
    return 0;
}

size_t pm__patch_bytes(const struct pm_patch *pp)
{
    const struct pm_lora *l = pp->lora;
    if (l->src)
        return l->ws;
    /* up + down + delta, f32; and a delta-sized margin for a backend that converts
     * a half-precision W through device scratch. */
    return (size_t)(l->out * l->rank + l->rank * l->in + 2 * l->out * l->in) * 4;
}

size_t pm__patch_workspace(const struct patcher *p)
{
    size_t most = 0;
    for (int i = 0; i < p->npatches; i++) {
        if (pm__patch_is_noop(&p->patches[i]))
            continue;
        size_t n = pm__patch_bytes(&p->patches[i]);
        if (n > most)
            most = n;
    }
    return most;
}

size_t patcher_patch_workspace_bytes(const struct patcher *p) { return pm__patch_workspace(p); }

/* W += strength * scale * (up @ down), on the device, in the compute stream's order. */
static int apply_one(struct dev *d, const struct pm_weight *w, void *wdata,
                     const struct pm_patch *pp, struct err *e)
{
    const struct pm_lora *l = pp->lora;
    int64_t ws[2] = {l->out, l->in}, us[2] = {l->out, l->rank}, ds[2] = {l->rank, l->in};
    struct tensor *W = NULL, *U = NULL, *D = NULL, *delta = NULL;
    int rc;
    if ((rc = tensor_new_external(d, w->dt, 2, ws, wdata, NULL, NULL, &W, e)) < 0)
        goto fail;
    if ((rc = tensor_new(d, TENSOR_F32, 2, us, &U, e)) < 0)
        goto fail;
    if ((rc = tensor_new(d, TENSOR_F32, 2, ds, &D, e)) < 0)
        goto fail;
    if ((rc = tensor_new(d, TENSOR_F32, 2, ws, &delta, e)) < 0)
        goto fail;
    if ((rc = tensor_write_f32(U, l->up, l->out * l->rank, e)) < 0)
        goto fail;
    if ((rc = tensor_write_f32(D, l->down, l->rank * l->in, e)) < 0)
        goto fail;
    if ((rc = tensor_matmul(delta, U, D, 0, 0, pp->strength * l->scale, e)) < 0)
        goto fail;
    rc = tensor_add(W, W, delta, e);
fail:
    tensor_free(delta);
    tensor_free(D);
    tensor_free(U);
    tensor_free(W);
    if (rc < 0)
        err_prefix(e, "lora patch of '%s'", w->key);
    return rc;
}

static int apply_model(struct dev *d, const struct pm_weight *w, void *wdata,
                       const struct pm_patch *pp, struct err *e);

static int apply_patch(struct dev *d, const struct pm_weight *w, void *wdata,
                       const struct pm_patch *pp, struct err *e)
{
    return pp->lora->src ? apply_model(d, w, wdata, pp, e) : apply_one(d, w, wdata, pp, e);
}

/*
 * A model patch (ComfyUI's calculate_weight for a patch whose value is another model's
 * weight list): W = strength_model * W + strength * W2, W2 being src's weight with src's
 * own patches, computed in f32 as ComfyUI's intermediate dtype, so that W is rounded to
 * its storage dtype once. src is read from its host copy: it need not be loaded.
 */
static int apply_model(struct dev *d, const struct pm_weight *w, void *wdata,
                       const struct pm_patch *pp, struct err *e)
{
    const struct pm_lora *l = pp->lora;
    const struct patcher *src = l->src;
    const struct pm_weight *sw = &src->model->layers[l->src_layer].w[l->src_index];
    int64_t n = (int64_t)(w->bytes / tensor_dtype_size(w->dt));
    struct tensor *W = NULL, *T = NULL;
    void *tbuf = NULL;
    float *host = NULL;
    int rc;
    if ((rc = tensor_new_external(d, w->dt, 1, &n, wdata, NULL, NULL, &W, e)) < 0)
        goto fail;
    if (pp->strength == 0.0f) {
        rc = tensor_scale(W, W, pp->strength_model, e);
        goto fail;
    }
    /* src's bytes are borrowed from its file too: the same check as an acquire. */
    if ((rc = patcher_model_check(src->model, e)) < 0)
        goto fail;
    if ((rc = dev_alloc(d, (size_t)n * sizeof(float), &tbuf)) < 0) {
        err_set(e, rc, "no room for a copy of '%s' (%zu bytes)", sw->key,
                (size_t)n * sizeof(float));
        goto fail;
    }
    /* The host copy may be narrower than sw->dt (issue 15): the public reader says. */
    enum tensor_dtype hdt;
    const void *hsrc =
        patcher_model_host_data(src->model, l->src_layer, l->src_index, &hdt, NULL, NULL);
    host = xmalloc((size_t)n * sizeof(float));
    tensor_convert_host(host, TENSOR_F32, hsrc, hdt, (size_t)n);
    if ((rc = tensor_new_external(d, TENSOR_F32, 1, &n, tbuf, NULL, NULL, &T, e)) < 0)
        goto fail;
    if ((rc = tensor_write_f32(T, host, n, e)) < 0)
        goto fail;
    struct pm_weight tw = *sw; /* the f32 copy, as the target of src's patches */
    tw.dt = TENSOR_F32;
    tw.bytes = (size_t)n * sizeof(float);
    for (int i = 0; i < src->npatches; i++) {
        const struct pm_patch *q = &src->patches[i];
        if (q->layer != l->src_layer || q->index != l->src_index || pm__patch_is_noop(q))
            continue;
        if ((rc = apply_patch(d, &tw, tbuf, q, e)) < 0)
            goto fail;
    }
    rc = tensor_axpby(W, pp->strength_model, W, pp->strength, T, e);
fail:
    tensor_free(T);
    tensor_free(W);
    dev_free(d, tbuf); /* as a tensor's own storage is freed (stream-ordered on CUDA) */
    xfree(host);
    if (rc < 0)
        err_prefix(e, "merge patch of '%s'", w->key);
    return rc;
}

int pm__apply_patches(struct patcher *p, int layer, void *buf, struct dev *d, struct err *e)
{
    const struct pm_layer *L = &p->model->layers[layer];
    for (int i = 0; i < p->npatches; i++) {
        const struct pm_patch *pp = &p->patches[i];
        /* Strength 0 adds nothing: skipping it keeps the bytes identical to no LoRA. */
        if (pp->layer != layer || pm__patch_is_noop(pp))
            continue;
        const struct pm_weight *w = &L->w[pp->index];
        int rc = apply_patch(d, w, (char *)buf + w->off, pp, e);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Make a resident layer's device copy match `sig`; returns the data base pointer. */
static int prepare_resident(struct patcher *p, struct pm_layer *L, int layer, uint64_t sig,
                            void **data, struct err *e)
{
    struct patcher_model *m = p->model;
    if (m->zero_copy && sig == 0 && !L->dev_buf) {
        *data = NULL; /* views point at the host copy itself */
        return 0;
    }
    int rc;
    if (!L->dev_buf) {
        /* Zero-copy model whose layer now needs patches: give it its own copy. */
        if ((rc = dev_alloc(m->dev, L->bytes, &L->dev_buf)) < 0)
            return err_set(e, rc, "cannot patch layer '%s' of '%s': %zu bytes", L->name,
                           m->name, L->bytes);
        m->resident_bytes += L->bytes;
        L->dev_sig = 1; /* force the upload below */
    }
    if (L->dev_sig != sig) {
        if ((rc = pm__upload_layer(m->dev, L, L->dev_buf)) < 0)
            return err_set(e, rc, "cannot upload layer '%s' of '%s'", L->name, m->name);
        L->dev_sig = 0;
        if (sig && (rc = pm__apply_patches(p, layer, L->dev_buf, m->dev, e)) < 0)
            return rc;
        L->dev_sig = sig;
    }
    *data = L->dev_buf;
    return 0;
}

int pm__bake_resident(struct patcher *p, int layer, struct err *e)
{
    void *data;
    return prepare_resident(p, &p->model->layers[layer], layer, pm__layer_sig(p, layer), &data,
                            e);
}

/* Layers held by this thread (acquires not yet released): the precision scope of
 * patcher_model_set_precision ends when it drops to 0. */
static _Thread_local int held_layers;

static int acquire(struct patcher *p, int layer, struct tensor *const **w, struct err *e);

int patcher_acquire(struct patcher *p, int layer, struct tensor *const **w, struct err *e)
{
    int rc = acquire(p, layer, w, e);
    if (rc >= 0) {
        held_layers++;
        tensor_precision_set(p->model->prec);
    }
    return rc;
}

static int acquire(struct patcher *p, int layer, struct tensor *const **w, struct err *e)
{
    struct patcher_model *m = p->model;
    *w = NULL;
    if (!m->mm)
        return err_set(e, ERR_INVALID, "model '%s' is not loaded (call mm_load_models first)",
                       m->name);
    if (layer < 0 || layer >= m->nlayers)
        return err_set(e, ERR_INVALID, "model '%s' has no layer %d", m->name, layer);
    struct pm_layer *L = &m->layers[layer];
    if (L->holds > 0) {
        L->holds++;
        *w = L->views;
        return 0;
    }
    /* Borrowed host bytes are read below (upload) or during compute (zero copy):
     * a model file changed on disk must fail the node here, not feed it other
     * weights. One fstat per layer, small beside any layer's compute. */
    int rc = patcher_model_check(m, e);
    if (rc < 0)
        return rc;
    uint64_t sig = pm__layer_sig(p, layer);
    void *data = NULL;
    if (L->resident) {
        rc = prepare_resident(p, L, layer, sig, &data, e);
    } else if (!m->st) {
        /* Partly unloaded for another model since this node's mm_load_models. */
        return err_set(e, ERR_INVALID,
                       "layer '%s' of '%s' is not on the device (call mm_load_models)",
                       L->name, m->name);
    } else {
        rc = mm__stream_acquire(m, m->st, layer, &data, e);
        if (rc >= 0) {
            L->slot = rc;
            uint64_t *ssig = mm__stream_slot_sig(m->st, rc);
            if (*ssig != sig) {
                /* The slot holds this layer patched for another clone: start clean. */
                if (*ssig != 0 && (rc = pm__upload_layer(m->dev, L, data)) < 0) {
                    err_set(e, rc, "cannot upload layer '%s' of '%s'", L->name, m->name);
                } else {
                    *ssig = 0;
                    rc = sig ? pm__apply_patches(p, layer, data, m->dev, e) : 0;
                    if (rc >= 0)
                        *ssig = sig;
                }
            }
            if (rc < 0) {
                mm__stream_release(m, m->st, layer);
                L->slot = -1;
            }
        }
    }
    if (rc < 0)
        return rc;
    L->views = xcalloc((size_t)(L->nw ? L->nw : 1), sizeof(*L->views));
    for (int j = 0; j < L->nw; j++) {
        const struct pm_weight *wt = &L->w[j];
        /* Zero copy: the host copy itself, at its own (maybe narrower) dtype. */
        void *ptr = data ? (char *)data + wt->off : (void *)wt->host;
        enum tensor_dtype vdt = data ? wt->dt : wt->host_dt;
        if ((rc = tensor_new_external(m->dev, vdt, wt->ndim, wt->shape, ptr, NULL, NULL,
                                      &L->views[j], e)) < 0) {
            L->holds = 1;
            held_layers++; /* patcher_release below counts it off */
            patcher_release(p, layer);
            return rc;
        }
    }
    L->holds = 1;
    m->pages_live = 1; /* zero copy reads the host copy in the ops; an upload read it */
    L->t_acquired = clock_mono_sec() * 1e3;
    if (layer == 0)
        m->passes++;
    *w = L->views;
    return 0;
}

void patcher_release(struct patcher *p, int layer)
{
    struct patcher_model *m = p->model;
    if (layer < 0 || layer >= m->nlayers)
        return;
    struct pm_layer *L = &m->layers[layer];
    if (L->holds <= 0)
        return;
    if (held_layers > 0 && --held_layers == 0)
        tensor_precision_set(TENSOR_PRECISION_F32);
    if (--L->holds > 0)
        return;
    /* On host devices compute is synchronous, so acquire-to-release is the layer's
     * compute time: the cost model uses it on the next plan. */
    if (m->dev && dev_is_host(m->dev) && L->t_acquired > 0) {
        double t = clock_mono_sec() * 1e3 - L->t_acquired;
        L->comp_ms = L->comp_ms < 0 ? t : 0.7 * L->comp_ms + 0.3 * t;
    }
    for (int j = 0; j < L->nw; j++)
        tensor_free(L->views[j]);
    xfree(L->views);
    L->views = NULL;
    if (L->slot >= 0) {
        mm__stream_release(m, m->st, layer);
        L->slot = -1;
    }
}

struct dev *patcher_device(const struct patcher *p) { return p->model->mm ? p->model->dev : NULL; }
