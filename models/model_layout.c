/*
 * Tensor layout from the configuration knobs (see model_config.h): the walk of
 * each component lives with it (text/text_layout.c, unet/unet_layout.c,
 * vae/vae_layout.c); the prefixes come from the family.
 */
#include "model_config.h"
#include "model_layout_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "family.h"

const char *model_component_name(enum model_component comp)
{
    switch (comp) {
    case MODEL_UNET: return "unet";
    case MODEL_VAE: return "vae";
    case MODEL_CLIP: return "clip";
    case MODEL_CLIP2:
        return "clip2";
    default: return "?";
    }
}

const char *model_prefix(const struct model_config *c, enum model_component comp)
{
    const struct model_family *f = model_family_get(c->family);
    return f && comp < MODEL_COMPONENT_COUNT ? f->prefix[comp] : NULL;
}

void key__layer(struct key_walk *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->layer, sizeof(w->layer), fmt, ap);
    va_end(ap);
}

void key__emit(struct key_walk *w, enum model_init init, int ndim, const int64_t *shape,
               const char *fmt, ...)
{
    struct model_key k;
    memset(&k, 0, sizeof(k));
    int len = snprintf(k.name, sizeof(k.name), "%s", w->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k.name + len, sizeof(k.name) - (size_t)len, fmt, ap);
    va_end(ap);
    snprintf(k.layer, sizeof(k.layer), "%s", w->layer);
    k.rel = len;
    k.comp = w->comp;
    k.init = init;
    k.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        k.shape[i] = shape[i];
    w->fn(w->user, &k);
    w->n++;
}

void key__wb(struct key_walk *w, const char *name, int ndim, const int64_t *shape)
{
    key__emit(w, MODEL_INIT_WEIGHT, ndim, shape, "%s.weight", name);
    key__emit(w, MODEL_INIT_BIAS, 1, shape, "%s.bias", name);
}

void key__norm(struct key_walk *w, const char *name, int64_t c)
{
    key__emit(w, MODEL_INIT_NORM, 1, KEY_S(c), "%s.weight", name);
    key__emit(w, MODEL_INIT_BIAS, 1, KEY_S(c), "%s.bias", name);
}

void key__name(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, size, fmt, ap);
    va_end(ap);
}

size_t model_layout_build(const struct model_config *c,
                          void (*fn)(void *user, const struct model_key *k), void *user)
{
    struct key_walk w = {.fn = fn, .user = user};
    for (int comp = MODEL_CLIP; comp <= MODEL_CLIP2; comp++) {
        if (!model_prefix(c, comp) || c->text[comp - MODEL_CLIP].width <= 0)
            continue;
        w.comp = comp;
        w.prefix = model_prefix(c, comp);
        text__walk(&w, &c->text[comp - MODEL_CLIP]);
    }
    w.comp = MODEL_UNET;
    w.prefix = model_prefix(c, MODEL_UNET);
    unet__walk(&w, &c->unet);
    w.comp = MODEL_VAE;
    w.prefix = model_prefix(c, MODEL_VAE);
    vae__walk(&w, &c->vae);
    return w.n;
}
