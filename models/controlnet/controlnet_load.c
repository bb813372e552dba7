/*
 * Loading a ControlNet file (see controlnet.h): naming, detection through the
 * checkpoint's UNet detection (checkpoint_impl.h) on the trunk keys renamed to
 * model.diffusion_model.*, validation against controlnet_layout, and the patcher model.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "checkpoint_impl.h"
#include "controlnet_impl.h"
#include "family.h"
#include "log.h"

#define CN_PREFIXED 1u  /* map flag: the file's names carry "control_model." */
#define CN_DIFFUSERS 2u /* map flag: diffusers ControlNetModel names */
#define CN_PTH_PREFIX "control_model."

static int starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* File name -> the UNet name the layout uses; "difference" and names outside the
 * control_model. prefix (of a prefixed file) are not weights. */
static int cn_name(const char *name, unsigned flags, char *buf, size_t size)
{
    if (strcmp(name, "difference") == 0)
        return -1;
    if (flags & CN_PREFIXED) {
        if (!starts_with(name, CN_PTH_PREFIX))
            return -1;
        name += strlen(CN_PTH_PREFIX);
    }
    char ldm[256];
    /* an unknown diffusers name stays as it is: the check calls it unexpected */
    if ((flags & CN_DIFFUSERS) && controlnet__name_from_diffusers(name, ldm, sizeof(ldm)) == 0)
        name = ldm;
    snprintf(buf, size, "%s%s", MODEL_PREFIX_UNET, name);
    return 1;
}

/* What a file that is no classic ControlNet holds, for the error. */
static int not_a_controlnet(const struct st_file *f, struct err *e)
{
    const char *what = "no zero_convs.0.0.weight (a T2I adapter or another kind of file?)";
    for (size_t i = 0; i < f->n_tensors; i++) {
        const char *nm = f->tensors[i].name;
        if (strcmp(nm, "lora_controlnet") == 0) {
            what = "a Control-LoRA (lora_controlnet)";
            break;
        }
        if (starts_with(nm, "model.diffusion_model.")) {
            what = "a checkpoint (model.diffusion_model.*), not a ControlNet";
            break;
        }
        if (strstr(nm, "lora_up.") || strstr(nm, "lora_A") || starts_with(nm, "lora_")) {
            what = "a LoRA file, not a ControlNet";
            break;
        }
    }
    return err_set(e, ERR_UNSUPPORTED, "'%s' is not a supported ControlNet: %s", f->path, what);
}

void controlnet__check_key(void *user, const struct model_key *k)
{
    struct controlnet__check *c = user;
    if (c->rc < 0)
        return;
    struct nkey *nk = ckpt__ntable_find(c->nt, k->name);
    if (!nk) {
        c->rc = err_set(c->e, ERR_INVALID, "'%s': %s tensor '%s' is missing", c->f->path,
                        c->what, k->name + k->rel);
        return;
    }
    nk->used = 1;
    if ((c->rc = ckpt__check_tensor(c->f, nk->t, k, c->e)) == 0)
        ckpt__items_push(&c->items, k, nk->t);
}

int controlnet__check_unused(const struct controlnet__check *c, const char *layout)
{
    for (size_t i = 0; i < c->nt->n; i++)
        if (!c->nt->v[i].used)
            return err_set(c->e, ERR_INVALID,
                           "'%s': unexpected tensor '%s' (not part of the %s layout)",
                           c->f->path, c->nt->v[i].t->name, layout);
    return 0;
}

/*
 * A Union ControlNet (control_add_embedding.*, as comfy/controlnet.py detects it): its
 * type count from task_embedding's rows, its merge width tied to the trunk's (see
 * controlnet_union.c) and split into CONTROLNET_UNION_HEADS heads.
 */
static int union_types(const struct st_file *f, const struct ntable *nt, struct controlnet *cn,
                       struct err *e)
{
    const struct st_tensor *te;
    if (!ckpt__nfind(nt, "%scontrol_add_embedding.linear_1.bias", MODEL_PREFIX_UNET))
        return 0;
    te = ckpt__nfind(nt, "%stask_embedding", MODEL_PREFIX_UNET);
    if (!te || te->ndim != 2 || te->shape[0] < 1 || te->shape[0] > CONTROLNET_UNION_TYPES)
        return err_set(e, ERR_INVALID,
                       "'%s': a Union ControlNet needs task_embedding [1..%d, %d]", f->path,
                       CONTROLNET_UNION_TYPES, cn->cfg.unet.model_ch);
    if (te->shape[1] != cn->cfg.unet.model_ch || cn->cfg.unet.model_ch % CONTROLNET_UNION_HEADS)
        return err_set(e, ERR_INVALID,
                       "'%s': task_embedding is %lld wide; this Union ControlNet's trunk is %d",
                       f->path, (long long)te->shape[1], cn->cfg.unet.model_ch);
    cn->union_types = (int)te->shape[0];
    return 0;
}

/* Weights made here in f32 (a diff ControlNet's delta + the UNet's; a Control-LoRA's),
 * freed with the model. */
struct controlnet__owned {
    float **v;
    size_t n;
};

static void owned_free(void *user)
{
    struct controlnet__owned *o = user;
    for (size_t i = 0; i < o->n; i++)
        xfree(o->v[i]);
    xfree(o->v);
    xfree(o);
}

struct controlnet__owned *controlnet__owned_new(struct patcher_model *m)
{
    struct controlnet__owned *o = xcalloc(1, sizeof *o);
    patcher_model_keep(m, owned_free, o);
    return o;
}

void controlnet__owned_add(struct controlnet__owned *o, float *buf)
{
    o->v = xrealloc(o->v, (o->n + 1) * sizeof *o->v);
    o->v[o->n++] = buf;
}

/* delta (file) + the base UNet's weight of the same key, in f32: a new owned buffer. */
static int diff_weight(struct patcher_model *base, const struct ckpt__item *it,
                       const struct st_file *f, struct controlnet__owned *o, const float **out,
                       struct err *e)
{
    size_t n = st_tensor_numel(it->t);
    enum tensor_dtype sdt;
    float *w = NULL;
    int layer, idx, rc;
    ckpt__tensor_dtype(it->t, &sdt); /* validated */
    if ((rc = xtry_malloc(n * sizeof *w, (void **)&w, e)) < 0)
        return rc;
    tensor_convert_host(w, TENSOR_F32, st_tensor_data(f, it->t), sdt, n);
    if (patcher_model_find(base, it->key.name, &layer, &idx) == 0) {
        enum tensor_dtype bdt;
        int nd;
        int64_t shape[4];
        const void *b = patcher_model_host_data(base, layer, idx, &bdt, &nd, shape);
        size_t bn = 1;
        for (int i = 0; i < nd; i++)
            bn *= (size_t)shape[i];
        if (b && bn == n) {
            float *tmp = xmalloc(n * sizeof *tmp);
            tensor_convert_host(tmp, TENSOR_F32, b, bdt, n);
            for (size_t i = 0; i < n; i++)
                w[i] += tmp[i];
            xfree(tmp);
        }
    }
    controlnet__owned_add(o, w);
    *out = w;
    return 0;
}

static void file_close(void *user)
{
    st_close(user);
}

static int file_check(void *user, struct err *e)
{
    return st_check(user, e);
}

/* The patcher model: one layer per block of the layout, in its order. */
static int build_model(const struct st_file *f, const struct ckpt__items *items,
                       struct patcher_model *base, enum tensor_dtype dt, const char *name,
                       struct patcher_model **out, struct err *e)
{
    struct patcher_model *m =
        patcher_model_new(name, base || !strcmp(name, "controlnet") ? PATCHER_ROLE_UNET
                                                                   : PATCHER_ROLE_OTHER);
    struct controlnet__owned *o = base ? controlnet__owned_new(m) : NULL;
    /* Borrowed weights lie in f's mapping, except a diff ControlNet's (heap sums). */
    patcher_model_set_file_backed(m, !o);
    char last[48] = "";
    int layer = -1, rc = 0;
    for (size_t i = 0; i < items->n && rc == 0; i++) {
        const struct ckpt__item *it = &items->v[i];
        const void *src = st_tensor_data(f, it->t);
        enum tensor_dtype sdt;
        ckpt__tensor_dtype(it->t, &sdt);
        if (strcmp(it->key.layer, last) != 0) {
            snprintf(last, sizeof(last), "%s", it->key.layer);
            layer = patcher_model_add_layer(m, it->key.layer, 0);
        }
        if (o) {
            const float *w;
            if ((rc = diff_weight(base, it, f, o, &w, e)) < 0)
                break;
            src = w;
            sdt = TENSOR_F32;
        }
        /* returns the weight's index in its layer */
        if ((rc = patcher_model_add_weight(m, layer, it->key.name, dt, it->key.ndim,
                                           it->key.shape, src, sdt, e)) < 0) {
            err_prefix(e, "'%s': tensor '%s'", f->path, it->t->name);
            break;
        }
        rc = 0;
    }
    if (rc < 0) {
        patcher_model_unref(m);
        return rc;
    }
    *out = m;
    return 0;
}

int controlnet__patcher_new(struct st_file **f, const struct ckpt__items *items,
                            struct patcher_model *base, enum tensor_dtype dt, const char *name,
                            struct patcher **out, struct err *e)
{
    struct patcher_model *m = NULL;
    int rc;
    if ((rc = build_model(*f, items, base, dt, name, &m, e)) < 0 || (rc = st_check(*f, e)) < 0) {
        patcher_model_unref(m);
        return rc;
    }
    patcher_model_keep_checked(m, file_close, file_check, *f);
    *f = NULL;
    *out = patcher_new(m);
    patcher_model_unref(m);
    return 0;
}

int controlnet_load(const char *path, struct patcher *diff_base, enum tensor_dtype dt,
                    struct controlnet **out, struct err *e)
{
    struct st_file *f = NULL;
    struct ntable nt = {0};
    struct controlnet__check c = {.e = e, .what = "ControlNet"};
    struct controlnet *cn = NULL;
    int rc;
    unsigned flags = 0;
    *out = NULL;
    if ((rc = st_open(path, &f, e)) < 0)
        return rc;
    if (st_find(f, CN_PTH_PREFIX "zero_convs.0.0.weight"))
        flags = CN_PREFIXED;
    else if (st_find(f, "controlnet_cond_embedding.conv_in.weight"))
        flags = CN_DIFFUSERS;
    else if (!st_find(f, "zero_convs.0.0.weight")) {
        rc = not_a_controlnet(f, e);
        goto fail;
    }
    int diff = st_find(f, "difference") != NULL;
    ckpt__ntable_build(f, cn_name, flags, &nt);
    cn = xcalloc(1, sizeof *cn);
    if ((rc = ckpt__detect_unet(f, &nt, &cn->cfg, e)) < 0)
        goto fail;
    const struct st_tensor *h0 = ckpt__nfind(&nt, "%sinput_hint_block.0.weight", MODEL_PREFIX_UNET);
    if (!h0 || h0->ndim != 4) {
        rc = err_set(e, ERR_INVALID, "'%s': ControlNet without input_hint_block.0.weight", path);
        goto fail;
    }
    cn->hint_ch = (int)h0->shape[1];
    if ((rc = union_types(f, &nt, cn, e)) < 0)
        goto fail;
    c.f = f;
    c.nt = &nt;
    controlnet_layout_union(&cn->cfg, cn->hint_ch, cn->union_types, controlnet__check_key,
                            &c);
    char layout[64];
    snprintf(layout, sizeof(layout), "%s ControlNet", model_family_get(cn->cfg.family)->name);
    if ((rc = c.rc) < 0 || (rc = controlnet__check_unused(&c, layout)) < 0)
        goto fail;
    if (diff && !diff_base)
        log_warn("'%s' is a diff ControlNet loaded without a model: it will likely not work "
                 "(use DiffControlNetLoader)", path);
    struct patcher_model *base = diff ? (diff_base ? patcher_model_of(diff_base) : NULL) : NULL;
    if ((rc = controlnet__patcher_new(&f, &c.items, base, dt, "controlnet", &cn->p, e)) < 0)
        goto fail;
    atomic_init(&cn->_refs, 1);
    log_info("loaded ControlNet '%s': %s%s%s, %zu tensors", path,
             model_family_get(cn->cfg.family)->name, diff ? " (difference)" : "",
             cn->union_types ? " (Union)" : "", c.items.n);
    ckpt__ntable_release(&nt);
    xfree(c.items.v);
    *out = cn;
    return 0;
fail:
    ckpt__ntable_release(&nt);
    xfree(c.items.v);
    xfree(cn);
    st_close(f);
    return rc;
}

enum controlnet_kind controlnet_file_kind(const char *path)
{
    struct st_file *f = NULL;
    struct err e = {0};
    enum controlnet_kind k = CONTROLNET_KIND_CONTROLNET;
    if (st_open(path, &f, &e) < 0)
        return k;
    int cn = st_find(f, "zero_convs.0.0.weight") || st_find(f, CN_PTH_PREFIX "zero_convs.0.0.weight") ||
             st_find(f, "controlnet_cond_embedding.conv_in.weight");
    int t2i = st_find(f, "body.0.in_conv.weight") || st_find(f, "conv_in.weight") ||
              st_find(f, "adapter.body.0.resnets.0.block1.weight");
    if (st_find(f, "lora_controlnet"))
        k = CONTROLNET_KIND_LORA;
    else if (!cn && t2i)
        k = CONTROLNET_KIND_T2I;
    st_close(f);
    return k;
}

void controlnet_ref(struct controlnet *cn)
{
    atomic_fetch_add(&cn->_refs, 1);
}

void controlnet_unref(struct controlnet *cn)
{
    if (!cn || atomic_fetch_sub(&cn->_refs, 1) != 1)
        return;
    patcher_unref(cn->p);
    xfree(cn);
}
