/*
 * Control-LoRAs (see control_lora.h): the file kept open, and the ControlNet made from
 * it and a UNet by a walk of the ControlNet layout of the UNet's config.
 */
#include "control_lora.h"

#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "controlnet_impl.h"
#include "family.h"
#include "log.h"

#define LORA_MARKER "lora_controlnet"

int control_lora_load(const char *path, struct control_lora **out, struct err *e)
{
    struct st_file *f = NULL;
    int rc;
    *out = NULL;
    if ((rc = st_open(path, &f, e)) < 0)
        return rc;
    const struct st_tensor *h0 = st_find(f, "input_hint_block.0.weight");
    if (!st_find(f, LORA_MARKER))
        rc = err_set(e, ERR_UNSUPPORTED, "'%s' is not a Control-LoRA (no %s)", path, LORA_MARKER);
    else if (!h0 || h0->ndim != 4)
        rc = err_set(e, ERR_INVALID, "'%s': Control-LoRA without input_hint_block.0.weight",
                     path);
    if (rc < 0) {
        st_close(f);
        return rc;
    }
    struct control_lora *cl = xcalloc(1, sizeof *cl);
    cl->f = f;
    cl->hint_ch = (int)h0->shape[1];
    atomic_init(&cl->_refs, 1);
    log_info("loaded Control-LoRA '%s': %zu tensors, %d-channel hint", path, f->n_tensors,
             cl->hint_ch);
    *out = cl;
    return 0;
}

void control_lora_ref(struct control_lora *cl)
{
    atomic_fetch_add(&cl->_refs, 1);
}

void control_lora_unref(struct control_lora *cl)
{
    if (!cl || atomic_fetch_sub(&cl->_refs, 1) != 1)
        return;
    st_close(cl->f);
    xfree(cl);
}

struct make {
    const struct control_lora *cl;
    const struct patcher_model *unet;
    enum tensor_dtype dt;
    struct patcher_model *m;
    struct controlnet__owned *owned;
    unsigned char *used; /* per file tensor: the walk took it */
    char last[48];       /* the layer weights go to */
    int layer;
    struct err *e;
    int rc;
};

/* A file tensor by name + suffix (marked used), or NULL. */
static const struct st_tensor *take(struct make *mk, const char *name, const char *suffix)
{
    char n[200];
    snprintf(n, sizeof(n), "%s%s", name, suffix);
    const struct st_tensor *t = st_find(mk->cl->f, n);
    if (t)
        mk->used[t - mk->cl->f->tensors] = 1;
    return t;
}

/* f32 copy of a file tensor (its dtype checked by the caller). */
static void file_f32(const struct st_file *f, const struct st_tensor *t, float *dst)
{
    enum tensor_dtype dt;
    ckpt__tensor_dtype(t, &dt);
    tensor_convert_host(dst, TENSOR_F32, st_tensor_data(f, t), dt, st_tensor_numel(t));
}

/* w [o, n / o] += up.flatten(1) @ down.flatten(1), the product in double. */
static int add_low_rank(struct make *mk, const struct model_key *k, const char *stem, float *w,
                        size_t n)
{
    const struct st_tensor *up = take(mk, stem, ".up"), *down = take(mk, stem, ".down");
    const struct st_file *f = mk->cl->f;
    if (!up && !down)
        return 0;
    int64_t o = k->shape[0], cols = (int64_t)(n / (size_t)o), r = up && up->ndim >= 2 ? up->shape[1] : 0;
    enum tensor_dtype dt;
    if (!up || !down || r < 1 || up->shape[0] != o || (int64_t)st_tensor_numel(up) != o * r ||
        down->shape[0] != r || (int64_t)st_tensor_numel(down) != r * cols ||
        ckpt__tensor_dtype(up, &dt) < 0 || ckpt__tensor_dtype(down, &dt) < 0)
        return err_set(mk->e, ERR_INVALID,
                       "'%s': Control-LoRA pair '%s.up' / '%s.down' does not make a [%lld, %lld] "
                       "delta",
                       f->path, stem, stem, (long long)o, (long long)cols);
    float *u = xmalloc((size_t)o * (size_t)r * sizeof *u);
    float *d = xmalloc((size_t)r * (size_t)cols * sizeof *d);
    file_f32(f, up, u);
    file_f32(f, down, d);
    for (int64_t i = 0; i < o; i++)
        for (int64_t j = 0; j < cols; j++) {
            double s = 0;
            for (int64_t q = 0; q < r; q++)
                s += (double)u[i * r + q] * (double)d[q * cols + j];
            w[i * cols + j] += (float)s;
        }
    xfree(u);
    xfree(d);
    return 0;
}

/* The UNet's weight of k's name into w (n elements), or -1 when it has none such. */
static int unet_f32(const struct patcher_model *unet, const struct model_key *k, float *w,
                    size_t n)
{
    int layer, idx, nd;
    int64_t shape[4];
    enum tensor_dtype dt;
    if (patcher_model_find(unet, k->name, &layer, &idx) < 0)
        return -1;
    const void *src = patcher_model_host_data(unet, layer, idx, &dt, &nd, shape);
    size_t m = 1;
    for (int i = 0; i < nd; i++)
        m *= (size_t)shape[i];
    if (!src || m != n)
        return -1;
    tensor_convert_host(w, TENSOR_F32, src, dt, n);
    return 0;
}

static void on_key(void *user, const struct model_key *k)
{
    struct make *mk = user;
    const char *rel = k->name + k->rel;
    size_t n = 1;
    float *w = NULL;
    if (mk->rc < 0)
        return;
    for (int i = 0; i < k->ndim; i++)
        n *= (size_t)k->shape[i];
    if ((mk->rc = xtry_malloc(n * sizeof *w, (void **)&w, mk->e)) < 0)
        return;
    const struct st_tensor *t = take(mk, rel, "");
    if (t) {
        if ((mk->rc = ckpt__check_tensor(mk->cl->f, t, k, mk->e)) < 0)
            goto fail;
        file_f32(mk->cl->f, t, w);
    } else if (unet_f32(mk->unet, k, w, n) < 0) {
        mk->rc = err_set(mk->e, ERR_INVALID,
                         "'%s': Control-LoRA weight '%s' is neither in the file nor in the model",
                         mk->cl->f->path, rel);
        goto fail;
    }
    size_t l = strlen(rel);
    if (l > 7 && strcmp(rel + l - 7, ".weight") == 0) {
        char stem[192];
        snprintf(stem, sizeof(stem), "%.*s", (int)(l - 7), rel);
        if ((mk->rc = add_low_rank(mk, k, stem, w, n)) < 0)
            goto fail;
    }
    if (strcmp(k->layer, mk->last) != 0) {
        snprintf(mk->last, sizeof(mk->last), "%s", k->layer);
        mk->layer = patcher_model_add_layer(mk->m, k->layer, 0);
    }
    controlnet__owned_add(mk->owned, w); /* the model borrows it from here on */
    if ((mk->rc = patcher_model_add_weight(mk->m, mk->layer, k->name, mk->dt, k->ndim, k->shape,
                                           w, TENSOR_F32, mk->e)) > 0)
        mk->rc = 0;
    return;
fail:
    xfree(w);
}

int control_lora_make(const struct control_lora *cl, const struct patcher_model *unet,
                      const struct model_config *cfg, enum tensor_dtype dt,
                      struct controlnet **out, struct err *e)
{
    const struct st_file *f = cl->f;
    struct make mk = {.cl = cl, .unet = unet, .dt = dt, .layer = -1, .e = e};
    *out = NULL;
    mk.m = patcher_model_new("controlnet", PATCHER_ROLE_UNET);
    mk.owned = controlnet__owned_new(mk.m);
    mk.used = xcalloc(f->n_tensors ? f->n_tensors : 1, 1);
    controlnet_layout(cfg, cl->hint_ch, on_key, &mk);
    for (size_t i = 0; mk.rc == 0 && i < f->n_tensors; i++) {
        const char *nm = f->tensors[i].name;
        /* ComfyUI sets only .up/.down/.weight/.bias keys without "__" */
        if (!mk.used[i] && strcmp(nm, LORA_MARKER) != 0 && !strstr(nm, "__"))
            mk.rc = err_set(e, ERR_INVALID,
                            "'%s': unexpected tensor '%s' (not part of the %s ControlNet layout)",
                            f->path, nm, model_family_get(cfg->family)->name);
    }
    xfree(mk.used);
    if (mk.rc < 0) {
        err_prefix(e, "this Control-LoRA does not fit the %s model (width %d)",
                   model_family_get(cfg->family)->name, cfg->unet.model_ch);
        patcher_model_unref(mk.m);
        return mk.rc;
    }
    struct controlnet *cn = xcalloc(1, sizeof *cn);
    cn->cfg = *cfg;
    cn->hint_ch = cl->hint_ch;
    cn->p = patcher_new(mk.m);
    patcher_model_unref(mk.m);
    atomic_init(&cn->_refs, 1);
    *out = cn;
    return 0;
}
