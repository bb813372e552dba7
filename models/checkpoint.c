/*
 * Checkpoint names (normalised), validation against the layout of the detected
 * config, probing (see checkpoint.h). Detection is checkpoint_detect.c's.
 */
#include "checkpoint.h"
#include "checkpoint_impl.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "log.h"
#include "family.h"
#include "tensor.h"

/* ---- normalised name table ------------------------------------------------------------ */

static int starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Names ComfyUI never reads (sd15.md §1.2; a Hugging Face CLIP's position_ids buffer
 * and unused text_projection, in any family). */
static int is_ignored(const char *name)
{
    if (starts_with(name, "model_ema.") || starts_with(name, "first_stage_model.loss."))
        return 1;
    if (ends_with(name, ".text_model.embeddings.position_ids") ||
        ends_with(name, ".text_model.text_projection.weight"))
        return 1;
    /* Everything outside the component prefixes (schedule buffers, ...), except the
     * other text encoders' prefixes, which detection must see. */
    if (!starts_with(name, "model.diffusion_model.") && !starts_with(name, "first_stage_model.") &&
        !starts_with(name, "cond_stage_model.") && !starts_with(name, "conditioner."))
        return 1;
    return 0;
}

static int cmp_nkey(const void *a, const void *b)
{
    return strcmp(((const struct nkey *)a)->name, ((const struct nkey *)b)->name);
}

/*
 * A text encoder stored in another naming (OpenCLIP: SDXL's bigG) gets its internal
 * name (text_name_from_file). Returns 1 renamed into buf, 0 kept, -1 not used.
 */
static int text_file_name(const char *name, char *buf, size_t size)
{
    for (int id = 0; id < MODEL_FAMILY_COUNT; id++) {
        const struct model_family *fam = model_family_get(id);
        for (int i = 0; fam && i < 2; i++) {
            const char *p = fam->prefix[MODEL_CLIP + i];
            char rel[384];
            if (!p || fam->text_naming[i] == TEXT_NAMING_HF || !starts_with(name, p))
                continue;
            int rc = text_name_from_file(fam->text_naming[i], name + strlen(p), rel, sizeof(rel));
            if (rc > 0)
                snprintf(buf, size, "%s%s", p, rel);
            return rc;
        }
    }
    return 0;
}

/* The checkpoint's own renames (see checkpoint.h, step 2): 1 renamed into buf, 0 kept,
 * -1 not used. */
static int ckpt_name(const char *name, unsigned flags, char *buf, size_t size)
{
    char tmp[512];
    int renamed = 0;
    if (flags & CKPT_LOAD_TEXT_FILE) /* a standalone text encoder: all its own names */
        return ckpt__text_file_name(name, flags, buf, size);
    /* §1.3: old CLIP naming without the text_model. level. */
    if (starts_with(name, "cond_stage_model.transformer.") &&
        !starts_with(name, "cond_stage_model.transformer.text_model.")) {
        snprintf(tmp, sizeof(tmp), "cond_stage_model.transformer.text_model.%s",
                 name + strlen("cond_stage_model.transformer."));
        name = tmp;
        renamed = 1;
    }
    /* A standalone VAE file: bare or diffusers names become first_stage_model.*. */
    char vbuf[512];
    if ((flags & MODEL_LOAD_VAE_FILE) && ckpt__vae_file_name(name, vbuf, sizeof(vbuf))) {
        name = vbuf;
        renamed = 1;
    }
    char tbuf[512];
    int tr = text_file_name(name, tbuf, sizeof(tbuf));
    if (tr > 0) {
        name = tbuf;
        renamed = 1;
    }
    if (tr < 0 || is_ignored(name))
        return -1;
    if (renamed)
        snprintf(buf, size, "%s", name);
    return renamed;
}

void ckpt__ntable_build(const struct st_file *f,
                        int (*map)(const char *name, unsigned flags, char *buf, size_t size),
                        unsigned flags, struct ntable *nt)
{
    nt->v = xcalloc(f->n_tensors ? f->n_tensors : 1, sizeof(*nt->v));
    nt->n = 0;
    nt->skipped = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const char *name = f->tensors[i].name;
        char buf[512];
        int r = map(name, flags, buf, sizeof(buf));
        if (r < 0) {
            nt->skipped++;
            continue;
        }
        nt->v[nt->n].name = xstrdup(r > 0 ? buf : name);
        nt->v[nt->n].t = &f->tensors[i];
        nt->n++;
    }
    qsort(nt->v, nt->n, sizeof(*nt->v), cmp_nkey);
}

void ckpt__ntable_release(struct ntable *nt)
{
    for (size_t i = 0; i < nt->n; i++)
        xfree(nt->v[i].name);
    xfree(nt->v);
    nt->v = NULL;
    nt->n = 0;
}

struct nkey *ckpt__ntable_find(const struct ntable *nt, const char *name)
{
    struct nkey key = {.name = (char *)name};
    return bsearch(&key, nt->v, nt->n, sizeof(*nt->v), cmp_nkey);
}

const struct st_tensor *ckpt__nfind(const struct ntable *nt, const char *fmt, ...)
{
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    struct nkey *k = ckpt__ntable_find(nt, name);
    return k ? k->t : NULL;
}

size_t ckpt__count_prefix(const struct ntable *nt, const char *prefix)
{
    size_t n = 0;
    for (size_t i = 0; i < nt->n; i++)
        n += starts_with(nt->v[i].name, prefix);
    return n;
}

/* ---- validation --------------------------------------------------------------------------- */

/* Shape equality, accepting a 2-D [o,i] stored for a 1x1 conv [o,i,1,1] (§1.3). */
static int shape_ok(const struct st_tensor *t, const struct model_key *k)
{
    if (t->ndim == k->ndim) {
        for (int i = 0; i < k->ndim; i++)
            if (t->shape[i] != k->shape[i])
                return 0;
        return 1;
    }
    return k->ndim == 4 && t->ndim == 2 && k->shape[2] == 1 && k->shape[3] == 1 &&
           t->shape[0] == k->shape[0] && t->shape[1] == k->shape[1];
}

/*
 * 1 when a lane of the words holds an all-ones exponent (Inf or NaN). m: the lanes'
 * exponent mask repeated over the word; top: each lane's sign bit. Lanes of
 * (x & m) ^ m are zero exactly for such values and otherwise at least the exponent's
 * lowest bit, so adding m sets the sign bit of every lane but those (no carry leaves a
 * lane). Blocks of 64 words are a fixed trip count the compiler vectorises at -O2.
 */
static int words_nonfinite(const uint64_t *w, size_t n, uint64_t m, uint64_t top)
{
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        uint64_t all = top;
        for (size_t j = 0; j < 64; j++)
            all &= (((w[i + j] & m) ^ m) + m) & top;
        if (all != top)
            return 1;
    }
    uint64_t all = top;
    for (; i < n; i++)
        all &= (((w[i] & m) ^ m) + m) & top;
    return all != top;
}

/*
 * 1 when every value of `t` is finite, 0 when one is not, or a negative ERR_* (the
 * file could not be read). Read through the descriptor in pieces (st_tensor_read), not
 * the mapping: loading the full SD1.5 f16 checkpoint through the mapping left all of
 * its 2 GiB mapped, in the RSS of every later phase (CLIP's and the VAE's pages during
 * the UNet's steps), and the pages a model uses are mapped again by its first run.
 */
static int check_finite(const struct st_file *f, const struct st_tensor *t, struct err *e)
{
    uint64_t buf[8192]; /* 64 KiB, a multiple of every element size */
    uint64_t nbytes = t->nbytes, m, top;
    int rc;
    if (t->dtype == ST_DTYPE_F32) {
        m = 0x7f8000007f800000ull;
        top = 0x8000000080000000ull;
    } else if (t->dtype == ST_DTYPE_F16) {
        m = 0x7c007c007c007c00ull;
        top = 0x8000800080008000ull;
    } else if (t->dtype == ST_DTYPE_BF16) {
        m = 0x7f807f807f807f80ull;
        top = 0x8000800080008000ull;
    } else {
        return 1;
    }
    for (uint64_t off = 0; off < nbytes; off += sizeof(buf)) {
        size_t n = nbytes - off < sizeof(buf) ? (size_t)(nbytes - off) : sizeof(buf);
        if ((rc = st_tensor_read(f, t, off, buf, n, e)) < 0)
            return rc;
        /* A tail shorter than a word: pad with a finite value (zero) to a whole word. */
        if (n % 8)
            memset((char *)buf + n, 0, 8 - n % 8);
        if (words_nonfinite(buf, (n + 7) / 8, m, top))
            return 0;
    }
    return 1;
}

struct build {
    const struct model_config *cfg;
    const struct st_file *f;
    struct ntable *nt;
    unsigned flags;
    struct ckpt__items *items;
    struct err *e;
    int rc;
};

/* Every text encoder comes with MODEL_LOAD_CLIP. */
static const unsigned comp_flag[MODEL_COMPONENT_COUNT] = {MODEL_LOAD_UNET, MODEL_LOAD_VAE,
                                                          MODEL_LOAD_CLIP, MODEL_LOAD_CLIP};

unsigned ckpt__comp_flag(enum model_component c)
{
    return comp_flag[c];
}

/* Shape and dtype of a file tensor against the expected key (no value read). */
static int check_layout(const struct st_file *f, const struct st_tensor *t,
                        const struct model_key *k, struct err *e)
{
    const char *path = f->path;
    char want[96], got[96];
    if (!shape_ok(t, k)) {
        struct st_tensor tmp = {.ndim = k->ndim};
        memcpy(tmp.shape, k->shape, sizeof(k->shape));
        st_shape_str(&tmp, want, sizeof(want));
        st_shape_str(t, got, sizeof(got));
        return err_set(e, ERR_INVALID, "'%s': tensor '%s' has shape %s, expected %s", path,
                       t->name, got, want);
    }
    enum tensor_dtype src_dt;
    if (ckpt__tensor_dtype(t, &src_dt) < 0)
        return err_set(e, ERR_UNSUPPORTED,
                       "'%s': tensor '%s' is stored as %s; only F32, F16 and BF16 are "
                       "supported%s",
                       path, t->name, st_dtype_name(t->dtype),
                       t->dtype == ST_DTYPE_F8_E4M3 || t->dtype == ST_DTYPE_F8_E5M2
                           ? " (convert fp8 checkpoints to fp16)"
                           : "");
    return 0;
}

static int finite_err(const struct st_file *f, const struct st_tensor *t, int fin, struct err *e)
{
    if (fin < 0)
        return fin;
    if (!fin)
        return err_set(e, ERR_INVALID, "'%s': tensor '%s' contains NaN or infinite values", f->path,
                       t->name);
    return 0;
}

int ckpt__check_tensor(const struct st_file *f, const struct st_tensor *t,
                       const struct model_key *k, struct err *e)
{
    int rc = check_layout(f, t, k, e);
    return rc < 0 ? rc : finite_err(f, t, check_finite(f, t, e), e);
}

/*
 * Every item's values checked finite on tensor_threads_get() threads, tensors taken in
 * turn: one thread reading the 2 GB of a full SD1.5 f16 file through pread was ~0.4 s of
 * a cold txt2img (perf: the copy out of the page cache and the scan). The error is the
 * first bad tensor in layout order, as the serial check reported it.
 */
struct fin_job {
    const struct st_file *f;
    const struct ckpt__items *items;
    atomic_size_t next;
    signed char *res; /* per item: 1 finite, 0 not, -1 unreadable (checked again alone) */
};

static void *fin_worker(void *arg)
{
    struct fin_job *j = arg;
    struct err e = {0};
    for (size_t i; (i = atomic_fetch_add(&j->next, 1)) < j->items->n;) {
        int fin = check_finite(j->f, j->items->v[i].t, &e);
        j->res[i] = (signed char)(fin < 0 ? -1 : fin);
    }
    return NULL;
}

static int check_items_finite(const struct st_file *f, const struct ckpt__items *items,
                              struct err *e)
{
    struct fin_job j = {f, items, 0, xcalloc(items->n ? items->n : 1, 1)};
    int nt = tensor_threads_get();
    nt = nt < 1 ? 1 : nt > 16 ? 16 : nt;
    pthread_t th[16];
    int started = 0;
    while (started < nt - 1 && pthread_create(&th[started], NULL, fin_worker, &j) == 0)
        started++;
    fin_worker(&j); /* this thread too (alone if no thread could start) */
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    int rc = 0;
    for (size_t i = 0; i < items->n && rc == 0; i++)
        if (j.res[i] != 1) {
            const struct st_tensor *t = items->v[i].t;
            rc = finite_err(f, t, j.res[i] < 0 ? check_finite(f, t, e) : 0, e);
        }
    xfree(j.res);
    return rc;
}

void ckpt__items_push(struct ckpt__items *it, const struct model_key *k,
                      const struct st_tensor *t)
{
    if (it->n == it->cap) {
        it->cap = it->cap ? 2 * it->cap : 1024;
        it->v = xrealloc(it->v, it->cap * sizeof(*it->v));
    }
    it->v[it->n].key = *k;
    it->v[it->n].t = t;
    it->n++;
}

static void on_key(void *user, const struct model_key *k)
{
    struct build *b = user;
    if (b->rc < 0 || !(b->flags & comp_flag[k->comp]))
        return;
    struct nkey *nk = ckpt__ntable_find(b->nt, k->name);
    if (!nk) {
        /* Named as the file would spell it: bigG's internal names exist in no file. */
        const struct text_arch *ta =
            k->comp >= MODEL_CLIP ? &b->cfg->text[k->comp - MODEL_CLIP] : NULL;
        char rel[160];
        if (ta && ta->naming != TEXT_NAMING_HF)
            text_name_to_file(ta->naming, k->name + k->rel, rel, sizeof(rel));
        else
            snprintf(rel, sizeof(rel), "%s", k->name + k->rel);
        b->rc = err_set(b->e, ERR_INVALID, "'%s': tensor '%.*s%s' is missing", b->f->path,
                        k->rel, k->name, rel);
        return;
    }
    nk->used = 1;
    if ((b->rc = check_layout(b->f, nk->t, k, b->e)) < 0) /* values: check_items_finite */
        return;
    ckpt__items_push(b->items, k, nk->t);
}

static int check_unused(const struct build *b)
{
    for (size_t i = 0; i < b->nt->n; i++) {
        const struct nkey *k = &b->nt->v[i];
        if (k->used)
            continue;
        for (int c = 0; c < MODEL_COMPONENT_COUNT; c++) {
            const char *p = model_prefix(b->cfg, c);
            if ((b->flags & comp_flag[c]) && p && starts_with(k->name, p))
                return err_set(b->e, ERR_INVALID,
                               "'%s': unexpected tensor '%s' (not part of the %s %s layout)",
                               b->f->path, k->t->name, model_family_get(b->cfg->family)->name,
                               model_component_name((enum model_component)c));
        }
    }
    return 0;
}

int ckpt__tensor_dtype(const struct st_tensor *t, enum tensor_dtype *dt)
{
    switch (t->dtype) {
    case ST_DTYPE_F32: *dt = TENSOR_F32; return 0;
    case ST_DTYPE_F16: *dt = TENSOR_F16; return 0;
    case ST_DTYPE_BF16: *dt = TENSOR_BF16; return 0;
    default: return -1;
    }
}

int ckpt__validate(const char *path, unsigned flags, struct st_file **f_out,
                   struct model_config *cfg, struct ckpt__items *items, int *skipped,
                   struct err *e)
{
    struct st_file *f = NULL;
    struct ntable nt = {0};
    int rc;
    *f_out = NULL;
    memset(items, 0, sizeof(*items));
    if ((rc = st_open(path, &f, e)) < 0)
        return rc;
    ckpt__ntable_build(f, ckpt_name, flags, &nt);
    rc = (flags & CKPT_LOAD_TEXT_FILE) ? ckpt__detect_text(f, &nt, flags, cfg, e)
                                       : ckpt__detect(f, &nt, flags, cfg, e);
    if (rc < 0)
        goto fail;
    struct build b = {.cfg = cfg, .f = f, .nt = &nt, .flags = flags, .items = items, .e = e};
    model_layout_build(cfg, on_key, &b);
    if ((rc = b.rc) < 0 || (rc = check_unused(&b)) < 0 ||
        (rc = check_items_finite(f, items, e)) < 0)
        goto fail;
    if (skipped)
        *skipped = nt.skipped;
    ckpt__ntable_release(&nt);
    *f_out = f;
    return 0;
fail:
    ckpt__ntable_release(&nt);
    xfree(items->v);
    memset(items, 0, sizeof(*items));
    st_close(f);
    return rc;
}

int model_ckpt_probe(const char *path, struct model_config *cfg, struct err *e)
{
    struct st_file *f;
    struct ckpt__items items;
    int rc = ckpt__validate(path, MODEL_LOAD_ALL, &f, cfg, &items, NULL, e);
    if (rc < 0)
        return rc;
    xfree(items.v);
    st_close(f);
    return 0;
}
