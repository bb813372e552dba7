/*
 * Build an upscale model's patcher model from its file (see upscale.h).
 */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "log.h"
#include "upscale.h"

struct load {
    struct st_file *f;
    struct patcher_model *m;
    struct err *e;
    int rc;
    int layer;
    char last_layer[32];
    int borrowed;
};

static void add_one(void *user, const struct ups_weight *w)
{
    struct load *l = user;
    if (l->rc < 0)
        return;
    if (l->layer < 0 || strcmp(l->last_layer, w->layer)) {
        snprintf(l->last_layer, sizeof(l->last_layer), "%s", w->layer);
        l->layer = patcher_model_add_layer(l->m, w->layer, 0);
    }
    const struct st_tensor *t = st_find(l->f, w->key); /* validated by ups_detect */
    enum tensor_dtype src = t->dtype == ST_DTYPE_F32 ? TENSOR_F32
                            : t->dtype == ST_DTYPE_F16 ? TENSOR_F16
                                                       : TENSOR_BF16;
    int rc = patcher_model_add_weight(l->m, l->layer, w->key, TENSOR_F32, w->ndim, w->shape,
                                      st_tensor_data(l->f, t), src, l->e);
    if (rc < 0) {
        l->rc = rc;
        return;
    }
    /* Borrowed when the host copy kept the file's dtype (the patcher's rule: equal, or
     * f16/bf16 kept and widened by the ops): then the mapping must outlive the model. */
    enum tensor_dtype host_dt;
    patcher_model_host_data(l->m, l->layer, rc, &host_dt, NULL, NULL);
    l->borrowed += host_dt == src;
}

static void file_close(void *user)
{
    st_close(user);
}

static int file_check(void *user, struct err *e)
{
    return st_check(user, e);
}

int ups_load(const char *path, struct ups_arch *a, struct patcher_model **model, struct err *e)
{
    struct st_file *f = NULL;
    int rc;
    *model = NULL;
    if ((rc = st_open(path, &f, e)) < 0)
        return rc;
    if ((rc = ups_detect(f, path, a, e)) < 0) {
        st_close(f);
        return rc;
    }
    struct load l = {.f = f, .e = e, .layer = -1};
    l.m = patcher_model_new(a->kind == UPS_SRVGG ? "upscale (SRVGGNetCompact)" : "upscale (ESRGAN)",
                            PATCHER_ROLE_OTHER);
    patcher_model_set_file_backed(l.m, 1); /* borrowed weights lie in f's mapping */
    ups_weights(a, add_one, &l);
    /* Detection and conversion read the file: it must still be the one opened. */
    if ((rc = l.rc) < 0 || (rc = st_check(f, e)) < 0) {
        patcher_model_unref(l.m);
        st_close(f);
        return rc;
    }
    /* Borrowed weights point into the mapping: the model keeps (and re-checks) the file. */
    if (l.borrowed)
        patcher_model_keep_checked(l.m, file_close, file_check, f);
    else
        st_close(f);
    char desc[128];
    log_info("loaded upscale model '%s': %s, %.1f MiB", path, ups_arch_str(a, desc, sizeof(desc)),
             (double)patcher_model_bytes(l.m) / (1 << 20));
    *model = l.m;
    return 0;
}
