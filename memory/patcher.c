/*
 * patcher.c — building models (layer lists with weights, the host copy), patchers
 * and clones, and LoRA patch registration. Device work lives in patcher_access.c
 * (acquire/release, baking patches) and mm_*.c (planning, streaming).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "strhash.h"
#include "log.h"
#include "mm_internal.h"

static atomic_uint_fast64_t lora_ids = 1;

static size_t align_up(size_t n) { return (n + MM_ALIGN - 1) & ~(size_t)(MM_ALIGN - 1); }

static int L_weights_full(const struct patcher_model *m, int layer);
static void index_add(struct patcher_model *m, int layer, int w);

/* ---- models ------------------------------------------------------------------------ */

struct patcher_model *patcher_model_new(const char *name, enum patcher_role role)
{
    struct patcher_model *m = xcalloc(1, sizeof(*m));
    atomic_init(&m->refs, 1);
    m->name = xstrdup(name ? name : "model");
    m->role = role;
    return m;
}

void patcher_model_ref(struct patcher_model *m) { atomic_fetch_add(&m->refs, 1); }

void patcher_model_unref(struct patcher_model *m)
{
    if (!m || atomic_fetch_sub(&m->refs, 1) != 1)
        return;
    /* The manager holds no reference (it would keep models alive forever): the
     * last owner dropping the model unloads it. */
    mm__unload_model(m);
    for (int i = 0; i < m->nlayers; i++) {
        struct pm_layer *L = &m->layers[i];
        for (int j = 0; j < L->nw; j++) {
            /* The mapping goes away with the keeps below, and its addresses can come
             * back holding another file's weights. */
            tensor_bf16_cache_invalidate(L->w[j].host, L->w[j].host_bytes);
            xfree(L->w[j].key);
            xfree(L->w[j].owned);
        }
        xfree(L->w);
        xfree(L->name);
    }
    xfree(m->layers);
    xfree(m->index);
    for (int i = m->nkeeps - 1; i >= 0; i--)
        m->keeps[i].release(m->keeps[i].user);
    xfree(m->keeps);
    xfree(m->name);
    xfree(m);
}

void patcher_model_set_precision(struct patcher_model *m, enum tensor_precision p)
{
    m->prec = p;
}

enum tensor_precision patcher_precision(const struct patcher *p) { return p->model->prec; }

int patcher_model_add_layer(struct patcher_model *m, const char *name, double flops)
{
    if (m->nlayers == m->caplayers) {
        m->caplayers = m->caplayers ? m->caplayers * 2 : 16;
        m->layers = xrealloc(m->layers, (size_t)m->caplayers * sizeof(*m->layers));
    }
    struct pm_layer *L = &m->layers[m->nlayers];
    memset(L, 0, sizeof(*L));
    L->name = xstrdup(name ? name : "");
    L->flops = flops > 0 ? flops : 0;
    L->comp_ms = -1;
    L->pack_off = SIZE_MAX;
    L->slot = -1;
    return m->nlayers++;
}

/*
 * Whether a weight's host copy stays at the source dtype: when equal to dt, and when
 * widening it to dt is exact (f16 or bf16 for an f32 model). The second halves an
 * f16 checkpoint's resident memory against converting at load (issue 15), and costs
 * nothing in fidelity: the conversion moves into the op (or the upload) and yields
 * the same f32 values. Narrowing (an f32 file for an f16 model) rounds, so it is done
 * once here.
 */
static int keeps_src_dtype(const struct patcher_model *m, enum tensor_dtype dt,
                           enum tensor_dtype src_dt)
{
    if (src_dt == dt)
        return 1;
    return !m->convert && dt == TENSOR_F32 && (src_dt == TENSOR_F16 || src_dt == TENSOR_BF16);
}

int patcher_model_add_weight(struct patcher_model *m, int layer, const char *key,
                             enum tensor_dtype dt, int ndim, const int64_t *shape,
                             const void *src, enum tensor_dtype src_dt, struct err *e)
{
    if (layer < 0 || layer >= m->nlayers)
        return err_set(e, ERR_INVALID, "model '%s': no layer %d for weight '%s'", m->name,
                       layer, key ? key : "?");
    if (!key || !*key || !src)
        return err_set(e, ERR_INVALID, "model '%s': weight without a key or data", m->name);
    if (ndim < 1 || ndim > 4)
        return err_set(e, ERR_INVALID, "weight '%s': %d dims (want 1..4)", key, ndim);
    if (m->mm)
        return err_set(e, ERR_BUSY, "weight '%s': model '%s' is loaded", key, m->name);
    int l2, i2;
    if (patcher_model_find(m, key, &l2, &i2) == 0)
        return err_set(e, ERR_EXISTS, "model '%s': duplicate weight '%s'", m->name, key);
    if (L_weights_full(m, layer))
        return err_set(e, ERR_TOO_LARGE, "model '%s': too many weights in layer %d", m->name,
                       layer);
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1)
            return err_set(e, ERR_INVALID, "weight '%s': dim %d is %lld", key, i,
                           (long long)shape[i]);
        numel *= (size_t)shape[i];
    }
    struct pm_layer *L = &m->layers[layer];
    if (L->nw == L->capw) {
        L->capw = L->capw ? L->capw * 2 : 4;
        L->w = xrealloc(L->w, (size_t)L->capw * sizeof(*L->w));
    }
    struct pm_weight *w = &L->w[L->nw];
    memset(w, 0, sizeof(*w));
    w->key = xstrdup(key);
    w->dt = dt;
    w->ndim = ndim;
    for (int i = 0; i < 4; i++)
        w->shape[i] = i < ndim ? shape[i] : 1;
    w->bytes = numel * tensor_dtype_size(dt);
    w->host_dt = keeps_src_dtype(m, dt, src_dt) ? src_dt : dt;
    w->host_bytes = numel * tensor_dtype_size(w->host_dt);
    if (w->host_dt == src_dt) {
        w->host = src; /* borrowed: the file mapping, kept alive by patcher_model_keep */
        w->file_pages = m->file_backed;
    } else {
        w->owned = xmalloc(w->host_bytes);
        tensor_convert_host(w->owned, dt, src, src_dt, numel);
        w->host = w->owned;
    }
    w->off = align_up(L->bytes);
    L->bytes = w->off + w->bytes;
    L->nw++;
    index_add(m, layer, L->nw - 1);
    return L->nw - 1;
}

void patcher_model_keep(struct patcher_model *m, void (*release)(void *user), void *user)
{
    patcher_model_keep_checked(m, release, NULL, user);
}

void patcher_model_keep_checked(struct patcher_model *m, void (*release)(void *user),
                                int (*check)(void *user, struct err *e), void *user)
{
    m->keeps = xrealloc(m->keeps, (size_t)(m->nkeeps + 1) * sizeof(*m->keeps));
    m->keeps[m->nkeeps++] = (struct pm_keep){release, check, user};
}

int patcher_model_check(const struct patcher_model *m, struct err *e)
{
    for (int i = 0; i < m->nkeeps; i++) {
        int rc = m->keeps[i].check ? m->keeps[i].check(m->keeps[i].user, e) : 0;
        if (rc < 0)
            return err_prefix(e, "model '%s'", m->name);
    }
    return 0;
}

const char *patcher_model_name(const struct patcher_model *m) { return m->name; }
enum patcher_role patcher_model_role(const struct patcher_model *m) { return m->role; }
int patcher_model_layer_count(const struct patcher_model *m) { return m->nlayers; }

int patcher_model_weight_count(const struct patcher_model *m, int layer)
{
    return layer >= 0 && layer < m->nlayers ? m->layers[layer].nw : 0;
}

size_t patcher_model_layer_bytes(const struct patcher_model *m, int layer)
{
    return layer >= 0 && layer < m->nlayers ? m->layers[layer].bytes : 0;
}

size_t patcher_model_bytes(const struct patcher_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->nlayers; i++)
        n += m->layers[i].bytes;
    return n;
}

void patcher_model_set_convert(struct patcher_model *m, int on) { m->convert = !!on; }
void patcher_model_set_file_backed(struct patcher_model *m, int on) { m->file_backed = !!on; }

size_t patcher_model_host_bytes(const struct patcher_model *m, size_t *owned)
{
    size_t n = 0, own = 0;
    for (int i = 0; i < m->nlayers; i++)
        for (int j = 0; j < m->layers[i].nw; j++) {
            const struct pm_weight *w = &m->layers[i].w[j];
            n += w->host_bytes;
            own += w->owned ? w->host_bytes : 0;
        }
    if (owned)
        *owned = own;
    return n;
}


static int L_weights_full(const struct patcher_model *m, int layer)
{
    return m->layers[layer].nw >= 0xffff || layer >= 0x7fff;
}

static void index_insert(struct patcher_model *m, int layer, int w)
{
    size_t mask = m->index_cap - 1;
    size_t i = (size_t)strhash(m->layers[layer].w[w].key) & mask;
    while (m->index[i])
        i = (i + 1) & mask;
    m->index[i] = (int32_t)(((uint32_t)layer << 16 | (uint32_t)w) + 1);
}

/* Model code looks weights up by name on every access: keep it O(1). The table is
 * rebuilt whenever it would pass half full. */
static void index_add(struct patcher_model *m, int layer, int w)
{
    size_t n = 0;
    for (int i = 0; i < m->nlayers; i++)
        n += (size_t)m->layers[i].nw;
    if (2 * n > m->index_cap) {
        size_t cap = 64;
        while (cap < 4 * n)
            cap *= 2;
        xfree(m->index);
        m->index = xcalloc(cap, sizeof(*m->index));
        m->index_cap = cap;
        for (int i = 0; i < m->nlayers; i++)
            for (int j = 0; j < m->layers[i].nw; j++)
                index_insert(m, i, j);
        return;
    }
    index_insert(m, layer, w);
}

int patcher_model_find(const struct patcher_model *m, const char *key, int *layer, int *index)
{
    if (!m->index_cap)
        return ERR_NOT_FOUND;
    size_t mask = m->index_cap - 1;
    for (size_t i = (size_t)strhash(key) & mask; m->index[i]; i = (i + 1) & mask) {
        uint32_t v = (uint32_t)(m->index[i] - 1);
        int l = (int)(v >> 16), j = (int)(v & 0xffff);
        if (strcmp(m->layers[l].w[j].key, key) == 0) {
            *layer = l;
            *index = j;
            return 0;
        }
    }
    return ERR_NOT_FOUND;
}

const void *patcher_model_host_data(const struct patcher_model *m, int layer, int index,
                                    enum tensor_dtype *dt, int *ndim, int64_t shape[4])
{
    if (layer < 0 || layer >= m->nlayers || index < 0 || index >= m->layers[layer].nw)
        return NULL;
    const struct pm_weight *w = &m->layers[layer].w[index];
    if (dt)
        *dt = w->host_dt;
    if (ndim)
        *ndim = w->ndim;
    if (shape)
        memcpy(shape, w->shape, sizeof(w->shape));
    return w->host;
}

/* ---- patchers ------------------------------------------------------------------------ */

struct patcher *patcher_new(struct patcher_model *m)
{
    struct patcher *p = xcalloc(1, sizeof(*p));
    atomic_init(&p->refs, 1);
    patcher_model_ref(m);
    p->model = m;
    return p;
}

struct patcher *patcher_clone(const struct patcher *src)
{
    struct patcher *p = patcher_new(src->model);
    if (src->npatches) {
        p->patches = xmalloc((size_t)src->npatches * sizeof(*p->patches));
        memcpy(p->patches, src->patches, (size_t)src->npatches * sizeof(*p->patches));
        p->npatches = p->cappatches = src->npatches;
        for (int i = 0; i < p->npatches; i++)
            atomic_fetch_add(&p->patches[i].lora->refs, 1);
    }
    return p;
}

void patcher_ref(struct patcher *p) { atomic_fetch_add(&p->refs, 1); }

static void lora_unref(struct pm_lora *l)
{
    if (atomic_fetch_sub(&l->refs, 1) != 1)
        return;
    xfree(l->up);
    xfree(l->down);
    patcher_unref(l->src);
    xfree(l);
}

void patcher_unref(struct patcher *p)
{
    if (!p || atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    for (int i = 0; i < p->npatches; i++)
        lora_unref(p->patches[i].lora);
    xfree(p->patches);
    xfree(p->sig);
    patcher_model_unref(p->model);
    xfree(p);
}

struct patcher_model *patcher_model_of(const struct patcher *p) { return p->model; }
int patcher_patch_count(const struct patcher *p) { return p->npatches; }

int patcher_add_lora(struct patcher *p, const char *key, const void *up, const void *down,
                     enum tensor_dtype factor_dt, int64_t rank, float alpha, int has_alpha,
                     float strength, struct err *e)
{
    int layer, index;
    if (!key || patcher_model_find(p->model, key, &layer, &index) < 0)
        return err_set(e, ERR_NOT_FOUND, "lora key '%s' not in model '%s'", key ? key : "?",
                       p->model->name);
    const struct pm_weight *w = &p->model->layers[layer].w[index];
    int64_t out = w->shape[0], numel = 1;
    for (int i = 0; i < w->ndim; i++)
        numel *= w->shape[i];
    int64_t in = numel / out;
    if (!up || !down || rank < 1 || rank > 4096 || w->ndim < 2)
        return err_set(e, ERR_INVALID, "lora for '%s': bad factors (rank %lld, weight %d-D)",
                       key, (long long)rank, w->ndim);
    if (!isfinite(strength) || (has_alpha && !isfinite(alpha)))
        return err_set(e, ERR_INVALID, "lora for '%s': strength or alpha is not finite", key);
    struct pm_lora *l = xcalloc(1, sizeof(*l));
    atomic_init(&l->refs, 1);
    l->out = out;
    l->in = in;
    l->rank = rank;
    l->scale = has_alpha ? alpha / (float)rank : 1.0f;
    l->up = xmalloc((size_t)(out * rank) * sizeof(float));
    l->down = xmalloc((size_t)(rank * in) * sizeof(float));
    tensor_convert_host(l->up, TENSOR_F32, up, factor_dt, (size_t)(out * rank));
    tensor_convert_host(l->down, TENSOR_F32, down, factor_dt, (size_t)(rank * in));
    l->id = atomic_fetch_add(&lora_ids, 1);
    if (p->npatches == p->cappatches) {
        p->cappatches = p->cappatches ? p->cappatches * 2 : 16;
        p->patches = xrealloc(p->patches, (size_t)p->cappatches * sizeof(*p->patches));
    }
    p->patches[p->npatches++] = (struct pm_patch){layer, index, l, strength, 1.0f};
    xfree(p->sig); /* signatures recomputed lazily */
    p->sig = NULL;
    return 0;
}

const char *patcher_model_weight_key(const struct patcher_model *m, int layer, int index)
{
    if (layer < 0 || layer >= m->nlayers || index < 0 || index >= m->layers[layer].nw)
        return NULL;
    return m->layers[layer].w[index].key;
}

enum tensor_dtype patcher_model_weight_dtype(const struct patcher_model *m, int layer, int index)
{
    if (layer < 0 || layer >= m->nlayers || index < 0 || index >= m->layers[layer].nw)
        return TENSOR_F32;
    return m->layers[layer].w[index].dt;
}

int patcher_add_model_patch(struct patcher *p, const char *key, struct patcher *src,
                            const char *src_key, float strength_patch, float strength_model,
                            struct err *e)
{
    int layer, index, sl, si;
    if (!key || patcher_model_find(p->model, key, &layer, &index) < 0)
        return err_set(e, ERR_NOT_FOUND, "key '%s' not in model '%s'", key ? key : "?",
                       p->model->name);
    if (!src || !src_key || patcher_model_find(src->model, src_key, &sl, &si) < 0)
        return err_set(e, ERR_NOT_FOUND, "key '%s' not in model '%s'", src_key ? src_key : "?",
                       src ? src->model->name : "?");
    const struct pm_weight *w = &p->model->layers[layer].w[index];
    const struct pm_weight *sw = &src->model->layers[sl].w[si];
    int same = w->ndim == sw->ndim;
    for (int i = 0; same && i < 4; i++)
        same = w->shape[i] == sw->shape[i];
    if (!same)
        return err_set(e, ERR_INVALID, "cannot merge '%s': shape [%lld,%lld,%lld,%lld] of '%s' "
                       "does not match [%lld,%lld,%lld,%lld] of '%s'", key,
                       (long long)w->shape[0], (long long)w->shape[1], (long long)w->shape[2],
                       (long long)w->shape[3], p->model->name, (long long)sw->shape[0],
                       (long long)sw->shape[1], (long long)sw->shape[2], (long long)sw->shape[3],
                       src->model->name);
    if (!isfinite(strength_patch) || !isfinite(strength_model))
        return err_set(e, ERR_INVALID, "cannot merge '%s': a strength is not finite", key);
    struct pm_lora *l = xcalloc(1, sizeof(*l));
    atomic_init(&l->refs, 1);
    patcher_ref(src);
    l->src = src;
    l->src_layer = sl;
    l->src_index = si;
    /* The f32 copy of src's weight, and what src's own patches on it need while it is
     * in use (they are baked into the copy one after another). */
    size_t nested = 0;
    for (int i = 0; i < src->npatches; i++) {
        const struct pm_patch *q = &src->patches[i];
        if (q->layer == sl && q->index == si && !pm__patch_is_noop(q)) {
            size_t b = pm__patch_bytes(q);
            nested = b > nested ? b : nested;
        }
    }
    l->ws = sw->bytes / tensor_dtype_size(sw->dt) * sizeof(float) + nested;
    l->id = atomic_fetch_add(&lora_ids, 1);
    if (p->npatches == p->cappatches) {
        p->cappatches = p->cappatches ? p->cappatches * 2 : 16;
        p->patches = xrealloc(p->patches, (size_t)p->cappatches * sizeof(*p->patches));
    }
    p->patches[p->npatches++] =
        (struct pm_patch){layer, index, l, strength_patch, strength_model};
    xfree(p->sig);
    p->sig = NULL;
    return 0;
}

/*
 * A layer's patch signature: 0 without patches, else a hash of (lora id, weight,
 * strength) in order. Equal signatures mean equal patched bytes, so a device copy
 * baked for one clone is reused by another with the same patches.
 */
uint64_t pm__layer_sig(struct patcher *p, int layer)
{
    if (!p->sig) {
        p->sig = xcalloc((size_t)(p->model->nlayers ? p->model->nlayers : 1), sizeof(uint64_t));
        for (int i = 0; i < p->npatches; i++) {
            const struct pm_patch *pp = &p->patches[i];
            if (pm__patch_is_noop(pp))
                continue; /* adds nothing (patcher_access.c skips it too) */
            uint32_t sbits, mbits;
            memcpy(&sbits, &pp->strength, sizeof(sbits));
            memcpy(&mbits, &pp->strength_model, sizeof(mbits));
            uint64_t h = p->sig[pp->layer] ? p->sig[pp->layer] : 1469598103934665603ull;
            uint64_t parts[4] = {pp->lora->id, (uint64_t)pp->index, sbits, mbits};
            for (int k = 0; k < 4; k++) {
                h ^= parts[k];
                h *= 1099511628211ull;
                h ^= h >> 29;
            }
            p->sig[pp->layer] = h ? h : 1;
        }
    }
    return p->sig[layer];
}
