/*
 * T2I-Adapter files (see t2i_adapter.h): the layout of both kinds, detection from the
 * shapes as load_t2i_adapter does, diffusers names, and loading through the
 * ControlNet loader's checks (controlnet_impl.h).
 */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "controlnet_impl.h"
#include "log.h"
#include "t2i_adapter.h"

#define T2I_PREFIX "" /* weights keep ComfyUI's module names */

/* ---- layout ---- */

/* A full adapter's block (level i, block j): its input width and whether it
 * downsamples, as Adapter.__init__ picks its ResnetBlock. */
static void full_block(const struct t2i_arch *a, int i, int j, int *in_c, int *down)
{
    int first = j == 0 && i > 0;
    int from_prev = a->xl ? first && (i == 1 || i == 2) : first;
    *down = a->xl ? first && i == 2 : first;
    *in_c = from_prev ? a->channels[i - 1] : a->channels[i];
}

static void full_keys(struct key_walk *w, const struct t2i_arch *a)
{
    char n[48];
    int cin = a->hint_ch * a->unshuffle * a->unshuffle, k = a->ksize;
    key__layer(w, "conv_in");
    key__wb(w, "conv_in", KEY_SHAPE(a->channels[0], cin, 3, 3));
    for (int i = 0; i < T2I_LEVELS; i++)
        for (int j = 0; j < a->nums_rb; j++) {
            int idx = i * a->nums_rb + j, in_c, down, co = a->channels[i];
            full_block(a, i, j, &in_c, &down);
            key__layer(w, "body.%d", idx);
            if (down && a->use_conv) {
                key__name(n, sizeof(n), "body.%d.down_opt.op", idx);
                key__wb(w, n, KEY_SHAPE(in_c, in_c, 3, 3));
            }
            if (in_c != co) {
                key__name(n, sizeof(n), "body.%d.in_conv", idx);
                key__wb(w, n, KEY_SHAPE(co, in_c, k, k));
            }
            key__name(n, sizeof(n), "body.%d.block1", idx);
            key__wb(w, n, KEY_SHAPE(co, co, 3, 3));
            key__name(n, sizeof(n), "body.%d.block2", idx);
            key__wb(w, n, KEY_SHAPE(co, co, k, k));
        }
}

static void light_keys(struct key_walk *w, const struct t2i_arch *a)
{
    char n[48];
    int cin = a->hint_ch * a->unshuffle * a->unshuffle;
    for (int i = 0; i < T2I_LEVELS; i++) {
        int in_c = i ? a->channels[i - 1] : cin, inter = a->channels[i] / 4;
        key__layer(w, "body.%d", i);
        key__name(n, sizeof(n), "body.%d.in_conv", i);
        key__wb(w, n, KEY_SHAPE(inter, in_c, 1, 1));
        for (int k = 0; k < a->nums_rb; k++) {
            key__name(n, sizeof(n), "body.%d.body.%d.block1", i, k);
            key__wb(w, n, KEY_SHAPE(inter, inter, 3, 3));
            key__name(n, sizeof(n), "body.%d.body.%d.block2", i, k);
            key__wb(w, n, KEY_SHAPE(inter, inter, 3, 3));
        }
        key__name(n, sizeof(n), "body.%d.out_conv", i);
        key__wb(w, n, KEY_SHAPE(a->channels[i], inter, 1, 1));
    }
}

size_t t2i_adapter_layout(const struct t2i_arch *a,
                          void (*fn)(void *user, const struct model_key *k), void *user)
{
    struct key_walk w = {.fn = fn, .user = user, .comp = MODEL_UNET, .prefix = T2I_PREFIX};
    if (a->kind == T2I_LIGHT)
        light_keys(&w, a);
    else
        full_keys(&w, a);
    return w.n;
}

/* ---- names ---- */

/* diffusers -> ComfyUI (load_t2i_adapter's prefix_replace): adapter.body.I.resnets.J. ->
 * body.(2I+J)., adapter.body.I. -> body.(2I)., adapter. -> "". */
static int t2i_name(const char *name, unsigned flags, char *buf, size_t size)
{
    int i, j, len = 0;
    (void)flags;
    if (strncmp(name, "adapter.", 8) != 0)
        return 0;
    if (sscanf(name, "adapter.body.%d.resnets.%d.%n", &i, &j, &len) == 2 && len > 0)
        return snprintf(buf, size, "body.%d.%s", 2 * i + j, name + len), 1;
    len = 0;
    if (sscanf(name, "adapter.body.%d.%n", &i, &len) == 1 && len > 0)
        return snprintf(buf, size, "body.%d.%s", 2 * i, name + len), 1;
    return snprintf(buf, size, "%s", name + 8), 1;
}

int t2i_adapter_name_to_diffusers(const char *name, char *out, size_t size)
{
    int k, len = 0;
    if (strncmp(name, "conv_in.", 8) == 0)
        return snprintf(out, size, "adapter.%s", name), 0;
    if (sscanf(name, "body.%d.%n", &k, &len) != 1 || len == 0)
        return -1;
    const char *rest = name + len;
    if (strncmp(rest, "in_conv.", 8) == 0 && k % 2 == 0)
        return snprintf(out, size, "adapter.body.%d.%s", k / 2, rest), 0;
    if (strncmp(rest, "block1.", 7) == 0 || strncmp(rest, "block2.", 7) == 0)
        return snprintf(out, size, "adapter.body.%d.resnets.%d.%s", k / 2, k % 2, rest), 0;
    return -1; /* down_opt convs and light adapters have no diffusers name */
}

/* ---- detection ---- */

static int detect(const struct st_file *f, const struct ntable *nt, struct t2i_arch *a,
                  struct err *e)
{
    const struct st_tensor *t;
    int cin;
    memset(a, 0, sizeof(*a));
    if ((t = ckpt__nfind(nt, "body.0.in_conv.weight")) && t->ndim == 4) {
        a->kind = T2I_LIGHT;
        a->nums_rb = 4;
        a->unshuffle = 8;
        cin = (int)t->shape[1];
        for (int i = 0; i < T2I_LEVELS; i++) { /* the widths from the shapes (ComfyUI: SD's) */
            const struct st_tensor *o = ckpt__nfind(nt, "body.%d.out_conv.weight", i);
            if (!o || o->ndim != 4 || o->shape[0] % 4)
                return err_set(e, ERR_INVALID, "'%s': T2I-Adapter (light) without "
                               "body.%d.out_conv.weight", f->path, i);
            a->channels[i] = (int)o->shape[0];
        }
    } else if ((t = ckpt__nfind(nt, "conv_in.weight")) && t->ndim == 4) {
        const struct st_tensor *b2 = ckpt__nfind(nt, "body.0.block2.weight");
        if (!b2 || b2->ndim != 4)
            return err_set(e, ERR_INVALID, "'%s': T2I-Adapter without body.0.block2.weight",
                           f->path);
        a->kind = T2I_FULL;
        a->nums_rb = 2;
        cin = (int)t->shape[1];
        int c = (int)t->shape[0];
        int ch[T2I_LEVELS] = {c, 2 * c, 4 * c, 4 * c};
        memcpy(a->channels, ch, sizeof(ch));
        a->ksize = (int)b2->shape[2];
        a->xl = cin == 256 || cin == 768;
        a->unshuffle = a->xl ? 16 : 8;
        for (size_t i = 0; i < nt->n; i++) {
            const char *nm = nt->v[i].name;
            size_t l = strlen(nm), s = strlen("down_opt.op.weight");
            a->use_conv |= l >= s && strcmp(nm + l - s, "down_opt.op.weight") == 0;
        }
    } else if (st_find(f, "backbone.0.0.weight") || st_find(f, "backbone.10.blocks.0.weight")) {
        return err_set(e, ERR_UNSUPPORTED,
                       "'%s' is not a supported ControlNet: a Stable Cascade ControlNet",
                       f->path);
    } else {
        return err_set(e, ERR_UNSUPPORTED,
                       "'%s' is not a supported ControlNet: no zero_convs.0.0.weight, nor a "
                       "T2I-Adapter's conv_in or body.0.in_conv (another kind of file?)",
                       f->path);
    }
    int u2 = a->unshuffle * a->unshuffle;
    if (cin % u2 || cin / u2 < 1)
        return err_set(e, ERR_INVALID,
                       "'%s': T2I-Adapter input of %d channels is no %dx%d-unshuffled image",
                       f->path, cin, a->unshuffle, a->unshuffle);
    a->hint_ch = cin / u2;
    return 0;
}

int t2i_adapter_load(const char *path, enum tensor_dtype dt, struct t2i_adapter **out,
                     struct err *e)
{
    struct st_file *f = NULL;
    struct ntable nt = {0};
    struct controlnet__check c = {.e = e, .what = "T2I-Adapter"};
    struct t2i_adapter *t = NULL;
    int rc;
    *out = NULL;
    if ((rc = st_open(path, &f, e)) < 0)
        return rc;
    ckpt__ntable_build(f, t2i_name, 0, &nt);
    t = xcalloc(1, sizeof *t);
    if ((rc = detect(f, &nt, &t->a, e)) < 0)
        goto fail;
    c.f = f;
    c.nt = &nt;
    t2i_adapter_layout(&t->a, controlnet__check_key, &c);
    if ((rc = c.rc) < 0 || (rc = controlnet__check_unused(&c, "T2I-Adapter")) < 0)
        goto fail;
    if ((rc = controlnet__patcher_new(&f, &c.items, NULL, dt, "t2i_adapter", &t->p, e)) < 0)
        goto fail;
    atomic_init(&t->_refs, 1);
    log_info("loaded T2I-Adapter '%s': %s%s, %d-channel hint, widths %d..%d, %zu tensors", path,
             t->a.kind == T2I_LIGHT ? "light" : "full", t->a.xl ? " (SDXL)" : "",
             t->a.hint_ch, t->a.channels[0], t->a.channels[T2I_LEVELS - 1], c.items.n);
    ckpt__ntable_release(&nt);
    xfree(c.items.v);
    *out = t;
    return 0;
fail:
    ckpt__ntable_release(&nt);
    xfree(c.items.v);
    xfree(t);
    st_close(f);
    return rc;
}

void t2i_adapter_ref(struct t2i_adapter *t)
{
    atomic_fetch_add(&t->_refs, 1);
}

void t2i_adapter_unref(struct t2i_adapter *t)
{
    if (!t || atomic_fetch_sub(&t->_refs, 1) != 1)
        return;
    patcher_unref(t->p);
    xfree(t);
}

void t2i_adapter_image_size(const struct t2i_adapter *t, int w, int h, int *wo, int *ho)
{
    int u = t->a.unshuffle; /* math.ceil(width / unshuffle_amount) * unshuffle_amount */
    *wo = (w + u - 1) / u * u;
    *ho = (h + u - 1) / u * u;
}
