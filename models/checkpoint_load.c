/*
 * Build the patcher models of a validated checkpoint (see checkpoint.h).
 * Kept apart from detection so that probing needs no memory manager.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "log.h"
#include "checkpoint.h"
#include "checkpoint_impl.h"
#include "family.h"

/* The mapping is shared by the models that borrow from it; the last one to go
 * closes it. */
struct shared_file {
    struct st_file *f;
    atomic_int refs;
};

static void shared_file_unref(void *user)
{
    struct shared_file *s = user;
    if (atomic_fetch_sub(&s->refs, 1) == 1) {
        st_close(s->f);
        xfree(s);
    }
}

static int shared_file_check(void *user, struct err *e)
{
    return st_check(((struct shared_file *)user)->f, e);
}

/*
 * Hand `f` to the models that borrowed weights from it, or close it when none did
 * (every weight converted: the file is not needed after loading, and a change on
 * disk can no longer reach a loaded model).
 *
 * Why keep mapping rather than read into owned memory: a borrowed weight costs no
 * copy and its pages stay reclaimable file cache, which the file-dtype weights rely on
 * (issue 15: an f16 file's weights stay f16 for f32 compute, widened inside the ops);
 * a change on disk is made safe instead (st_check, the SIGBUS guard). Measured on the
 * full-size random SD1.5 f16 checkpoint (bench_model_load, this 2-core machine): as
 * f32 with MODEL_LOAD_CONVERT (all converted, the policy before issue 15) 18-25 s,
 * peak RSS 6106 MiB, RSS after the load 4072 MiB; as f32 or f16 (all borrowed)
 * 1.2-1.7 s, peak and after 2037 MiB, all of it file pages. Reading into owned memory
 * would make those 2036 MiB anonymous (not reclaimable) and add a read of the whole
 * file. The check costs one fstat, 1.3-2 us, per layer acquire.
 */
static void share_file(struct model_ckpt *ck, struct st_file *f,
                       const int borrowed[MODEL_COMPONENT_COUNT])
{
    struct shared_file *sf = NULL;
    for (int c = 0; c < MODEL_COMPONENT_COUNT; c++) {
        if (!ck->model[c] || !borrowed[c])
            continue;
        if (!sf) {
            sf = xcalloc(1, sizeof(*sf));
            sf->f = f;
            atomic_init(&sf->refs, 0);
        }
        atomic_fetch_add(&sf->refs, 1);
        patcher_model_keep_checked(ck->model[c], shared_file_unref, shared_file_check, sf);
    }
    if (!sf)
        st_close(f);
}

/* Add the validated tensors to the models, in layout order; counts borrowed weights. */
static int add_weights(const char *path, struct st_file *f, const struct ckpt__items *items,
                       const enum tensor_dtype dt[3], struct model_ckpt *ck,
                       int borrowed[MODEL_COMPONENT_COUNT], struct err *e)
{
    char last[MODEL_COMPONENT_COUNT][96] = {{0}};
    int layer[MODEL_COMPONENT_COUNT] = {0};
    for (size_t i = 0; i < items->n; i++) {
        const struct model_key *k = &items->v[i].key;
        const struct st_tensor *t = items->v[i].t;
        struct patcher_model *m = ck->model[k->comp];
        enum tensor_dtype want = dt[model_dtype_slot(k->comp)];
        if (strcmp(k->layer, last[k->comp]) != 0) {
            snprintf(last[k->comp], sizeof(last[k->comp]), "%s", k->layer);
            layer[k->comp] = patcher_model_add_layer(m, k->layer, 0);
        }
        enum tensor_dtype src_dt;
        ckpt__tensor_dtype(t, &src_dt); /* validated */
        /* The canonical 4-D shape also for a 2-D stored 1x1 conv: same bytes. */
        int rc = patcher_model_add_weight(m, layer[k->comp], k->name, want, k->ndim, k->shape,
                                          st_tensor_data(f, t), src_dt, e);
        if (rc < 0)
            return err_prefix(e, "'%s': tensor '%s'", path, t->name);
        /* Borrowed when the host copy kept the file's dtype (the patcher's rule:
         * equal, or f16/bf16 widened to f32 inside the ops). */
        enum tensor_dtype host_dt;
        patcher_model_host_data(m, layer[k->comp], rc, &host_dt, NULL, NULL);
        borrowed[k->comp] += host_dt == src_dt;
        ck->bytes[k->comp] += st_tensor_numel(t) * tensor_dtype_size(want);
        ck->tensors[k->comp]++;
    }
    return 0;
}

int model_ckpt_load(const char *path, unsigned flags, const enum tensor_dtype dt[3],
                   struct model_ckpt *ck, struct err *e)
{
    static const enum patcher_role roles[MODEL_COMPONENT_COUNT] = {
        PATCHER_ROLE_UNET, PATCHER_ROLE_VAE, PATCHER_ROLE_TEXT_ENCODER, PATCHER_ROLE_TEXT_ENCODER};
    struct st_file *f;
    struct ckpt__items items;
    int skipped = 0, borrowed[MODEL_COMPONENT_COUNT] = {0}, rc;
    memset(ck, 0, sizeof(*ck));
    if ((rc = ckpt__validate(path, flags, &f, &ck->cfg, &items, &skipped, e)) < 0)
        return rc;
    ck->canonical = model_config_is_canonical(&ck->cfg);
    ck->skipped = skipped;
    for (int c = 0; c < MODEL_COMPONENT_COUNT; c++)
        if ((flags & ckpt__comp_flag(c)) && model_prefix(&ck->cfg, c) &&
            (c < MODEL_CLIP || ck->cfg.text[c - MODEL_CLIP].width > 0)) {
            ck->model[c] = patcher_model_new(model_component_name((enum model_component)c), roles[c]);
            patcher_model_set_convert(ck->model[c], !!(flags & MODEL_LOAD_CONVERT));
            /* Borrowed weights point into f's read-only mapping: the planner may unmap
             * their pages while the model is idle (patcher.h). */
            patcher_model_set_file_backed(ck->model[c], 1);
        }
    if ((rc = add_weights(path, f, &items, dt, ck, borrowed, e)) < 0)
        goto fail;
    /* Validation and conversion read the whole file: if it changed meanwhile (or a
     * SIGBUS was caught), what we hold is a mix of two files. */
    if ((rc = st_check(f, e)) < 0)
        goto fail;
    xfree(items.v);
    share_file(ck, f, borrowed);
    log_info("loaded '%s': %s%s (unet %d tensors, vae %d, clip %d + %d; %d ignored)", path,
             model_family_get(ck->cfg.family)->name,
             ck->canonical ? "" : " layout with shrunk widths", ck->tensors[MODEL_UNET],
             ck->tensors[MODEL_VAE], ck->tensors[MODEL_CLIP], ck->tensors[MODEL_CLIP2],
             ck->skipped);
    return 0;
fail:
    xfree(items.v);
    model_ckpt_release(ck); /* before closing f: borrowed weights point into it */
    st_close(f);
    return rc;
}

void model_ckpt_release(struct model_ckpt *ck)
{
    for (int c = 0; c < MODEL_COMPONENT_COUNT; c++) {
        patcher_model_unref(ck->model[c]);
        ck->model[c] = NULL;
    }
}
